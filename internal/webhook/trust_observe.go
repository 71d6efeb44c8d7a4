package webhook

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"egret.io/egret/internal/trust"
)

// TrustBundle is what the ConfigMap TrustConfigMapName in one namespace
// holds, as the webhook sees it: who claims it and the digests of its two
// forms. Anyone who may create ConfigMaps in a namespace may create one of
// that name first, or change egret's: egret mounts it only when it holds
// exactly the bundle egret built (Matches).
type TrustBundle struct {
	// UID is the ConfigMap's UID.
	UID string
	// Ours is set when it carries egret's label (managed-by=egret): a
	// claim, not proof (anyone can set a label).
	Ours bool
	// Annotated is its TrustDigestAnnotation.
	Annotated string
	// Contents are the digests of its PEM bundle and PKCS#12 store.
	trust.Contents
}

// ObserveTrustBundle reads cm's claim and contents.
func ObserveTrustBundle(cm *corev1.ConfigMap) *TrustBundle {
	pemData := []byte(cm.Data[trust.BundleFile])
	if v, ok := cm.BinaryData[trust.BundleFile]; ok {
		pemData = v
	}
	return &TrustBundle{UID: string(cm.UID), Ours: trustOurs(cm), Annotated: cm.Annotations[TrustDigestAnnotation],
		Contents: trust.Read(pemData, cm.BinaryData[trust.TrustStoreFile])}
}

// Matches reports whether the ConfigMap is egret's and both forms hold
// exactly the certificates of digest: the only bundle Mutate mounts.
func (b *TrustBundle) Matches(digest string) bool {
	return b != nil && b.Ours && b.Contents.Matches(digest)
}

// updating reports a ConfigMap that looks like egret's for another bundle:
// labelled, its annotation naming what it holds. It is egret's own bundle
// before the writer caught up with a change of the source — or a copy of
// one made to look so; either way it is not mounted.
func (b *TrustBundle) updating() bool {
	return b.Ours && b.Problem == "" && b.PEMDigest == b.StoreDigest && b.Annotated == b.PEMDigest
}

// observedKey holds a TrustBundle, as JSON, on the stripped ConfigMaps the
// trust-bundle cache keeps.
const observedKey = "egret.io/observed-trust-bundle"

// TrustBundles looks up the TrustConfigMapName ConfigMap of a namespace.
// It watches those ConfigMaps in every namespace, whoever made them, and
// keeps only what ObserveTrustBundle reads of each (a bundle is hundreds
// of KiB; the cache holds a few hundred bytes per namespace). A namespace
// the cache has not seen is read from the API server.
type TrustBundles struct {
	cache cache.Cache
	api   client.Reader
}

// NewTrustBundles builds the lookup on mgr (its cache starts with mgr).
func NewTrustBundles(mgr interface {
	GetConfig() *rest.Config
	GetScheme() *runtime.Scheme
	GetAPIReader() client.Reader
	Add(manager.Runnable) error
}) (*TrustBundles, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {
			Field:     fields.OneTermEqualSelector("metadata.name", TrustConfigMapName),
			Transform: stripTrustBundle,
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("trust bundle cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, err
	}
	return &TrustBundles{cache: c, api: mgr.GetAPIReader()}, nil
}

// stripTrustBundle replaces a cached ConfigMap's data with its observation.
func stripTrustBundle(o any) (any, error) {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return o, nil
	}
	b, err := json.Marshal(ObserveTrustBundle(cm))
	if err != nil {
		return nil, err
	}
	ann := map[string]string{observedKey: string(b)}
	cm.Annotations, cm.Data, cm.BinaryData, cm.ManagedFields = ann, nil, nil, nil
	return cm, nil
}

// Get returns the observation of namespace ns's bundle ConfigMap, or nil
// when there is none.
func (t *TrustBundles) Get(ctx context.Context, ns string) (*TrustBundle, error) {
	key := types.NamespacedName{Namespace: ns, Name: TrustConfigMapName}
	var cm corev1.ConfigMap
	err := t.cache.Get(ctx, key, &cm)
	if err == nil {
		var b TrustBundle
		if err := json.Unmarshal([]byte(cm.Annotations[observedKey]), &b); err != nil {
			return nil, fmt.Errorf("cached %s/%s: %w", ns, TrustConfigMapName, err)
		}
		return &b, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get configmap %s/%s: %w", ns, TrustConfigMapName, err)
	}
	// Not seen yet: written a moment ago, or not at all.
	switch err := t.api.Get(ctx, key, &cm); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get configmap %s/%s: %w", ns, TrustConfigMapName, err)
	}
	return ObserveTrustBundle(&cm), nil
}

// Live reads namespace ns's bundle ConfigMap from the API server, past
// the cache; nil when there is none.
func (t *TrustBundles) Live(ctx context.Context, ns string) (*TrustBundle, error) {
	var cm corev1.ConfigMap
	switch err := t.api.Get(ctx, types.NamespacedName{Namespace: ns, Name: TrustConfigMapName}, &cm); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get configmap %s/%s: %w", ns, TrustConfigMapName, err)
	}
	return ObserveTrustBundle(&cm), nil
}

// List returns the observations of every namespace's bundle ConfigMap.
func (t *TrustBundles) List(ctx context.Context) (map[string]*TrustBundle, error) {
	var l corev1.ConfigMapList
	if err := t.cache.List(ctx, &l); err != nil {
		return nil, fmt.Errorf("list %s configmaps: %w", TrustConfigMapName, err)
	}
	out := make(map[string]*TrustBundle, len(l.Items))
	for _, cm := range l.Items {
		var b TrustBundle
		if err := json.Unmarshal([]byte(cm.Annotations[observedKey]), &b); err == nil {
			out[cm.Namespace] = &b
		}
	}
	return out, nil
}

// Cache is the cache itself, for watches.
func (t *TrustBundles) Cache() cache.Cache { return t.cache }

package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/trust"
)

// TrustController keeps TrustConfigMapName current in every namespace
// labelled discovery.InjectLabel=InjectEnabled, as discovery keeps
// egress-proxy-common: the system roots plus the source's certificates as
// PEM, and the same certificates as a PKCS#12 store for the JVM. Every
// replica tracks the bundle (Current, read by Mutate); the elected leader
// writes the ConfigMaps and deletes its own from namespaces that opt out.
// A ConfigMap of that name that egret did not create is left alone. A
// source that is missing or does not parse keeps the ConfigMaps as they
// are (pods keep the last good bundle) and is retried — except a missing
// source beside an interception CA, which adds no corporate CA: the
// bundle carries the interception CA alone.
type TrustController struct {
	// Policy names the source; required.
	Policy *TrustPolicy
	// Client reads from the manager's cache and writes; set by
	// SetupWithManager.
	Client client.Client
	// Rand seeds the trust store's encryption; nil means crypto/rand.
	Rand io.Reader
	// Bundles, if set, shows every ConfigMap of TrustConfigMapName, whoever
	// made it: the writer reports the opted-in namespaces whose one is not
	// egret's bundle (logged, and counted in Metrics).
	Bundles *TrustBundles
	// Metrics, if set, counts the foreign bundles.
	Metrics *metrics.Webhook

	source  client.Reader // a cache of the one source object
	icpt    client.Reader // a cache of the interception CA's ConfigMap; nil when none
	system  []*x509.Certificate
	current atomic.Pointer[TrustState]
	foreign map[string]string // namespace → what was reported (sync only)
}

// Current returns the bundle last built, or nil. Safe for concurrent use.
func (c *TrustController) Current() *TrustState { return c.current.Load() }

var trustKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "trust-bundle"}}

// SetupWithManager loads the system roots and registers the tracker
// (every replica) and the ConfigMap writer (leader only) with mgr.
func (c *TrustController) SetupWithManager(mgr ctrl.Manager) error {
	p := c.Policy
	var files []string
	if p.SystemRoots != "" {
		files = []string{p.SystemRoots}
	}
	sys, from, err := trust.SystemRoots(files...)
	if err != nil {
		return fmt.Errorf("trust bundle: %w", err)
	}
	c.system = sys
	log.Log.Info("trust bundle: system roots", "file", from, "certificates", len(sys), "source", p.Source())
	c.Client = mgr.GetClient()
	// One cache per source object, each holding that one object.
	oneObject := func(obj client.Object, ns, name string) (cache.Cache, error) {
		oc, err := cache.New(mgr.GetConfig(), cache.Options{
			Scheme:            mgr.GetScheme(),
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject:          map[client.Object]cache.ByObject{obj: {Field: fields.OneTermEqualSelector("metadata.name", name)}},
		})
		if err != nil {
			return nil, fmt.Errorf("trust source cache: %w", err)
		}
		return oc, mgr.Add(oc)
	}
	enqueue := func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{trustKey} }
	var srcs []func() source.Source
	if p.Kind != "" {
		srcCache, err := oneObject(c.sourceObject(), p.Namespace, p.Name)
		if err != nil {
			return err
		}
		c.source = srcCache
		srcs = append(srcs, func() source.Source {
			return source.Kind(srcCache, c.sourceObject(), handler.EnqueueRequestsFromMapFunc(enqueue))
		})
	}
	if p.InterceptName != "" {
		ic, err := oneObject(&corev1.ConfigMap{}, p.InterceptNamespace, p.InterceptName)
		if err != nil {
			return err
		}
		c.icpt = ic
		srcs = append(srcs, func() source.Source {
			return source.Kind(ic, client.Object(&corev1.ConfigMap{}), handler.EnqueueRequestsFromMapFunc(enqueue))
		})
	}
	tb := ctrl.NewControllerManagedBy(mgr).Named("trust-tracker").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), SkipNameValidation: ptr.To(true)})
	for _, src := range srcs {
		tb = tb.WatchesRawSource(src())
	}
	if err := tb.Complete(reconcile.Func(c.track)); err != nil {
		return fmt.Errorf("set up trust tracker: %w", err)
	}
	ours := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == TrustConfigMapName }))
	b := ctrl.NewControllerManagedBy(mgr).Named("trust-configmaps").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)})
	for _, src := range srcs {
		b = b.WatchesRawSource(src())
	}
	b = b.Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(enqueue)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(enqueue), ours)
	if c.Bundles != nil {
		b = b.WatchesRawSource(source.Kind(c.Bundles.Cache(), client.Object(&corev1.ConfigMap{}), handler.EnqueueRequestsFromMapFunc(enqueue)))
	}
	if err := b.Complete(reconcile.Func(c.sync)); err != nil {
		return fmt.Errorf("set up trust configmap writer: %w", err)
	}
	return nil
}

func (c *TrustController) sourceObject() client.Object {
	if c.Policy.Kind == "Secret" {
		return &corev1.Secret{}
	}
	return &corev1.ConfigMap{}
}

// built is one computed bundle.
type built struct {
	state  *TrustState
	bundle *trust.Bundle
}

// build reads the source and merges it with the system roots.
func (c *TrustController) build(ctx context.Context) (*built, error) {
	p := c.Policy
	data := map[string][]byte{}
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	var certs []*x509.Certificate
	// absent: the corporate source is not there and the interception CA
	// is configured. A cluster with no intercepting corporate proxy has no
	// corporate CAs to give (deploy/overlays/intercept carries the trust
	// component, whose corp-ca nobody creates there): the bundle still
	// carries egret's interception CA, or no pod would ever trust an
	// intercepted site. Without an interception CA a missing source stays
	// an error (pods keep the last bundle).
	absent := func(err error) bool { return apierrors.IsNotFound(err) && c.icpt != nil }
	sourced := p.Kind != ""
	switch p.Kind {
	case "":
	case "Secret":
		var s corev1.Secret
		if err := c.source.Get(ctx, key, &s); absent(err) {
			sourced = false
		} else if err != nil {
			return nil, fmt.Errorf("read %s: %w", p.Source(), err)
		}
		for k, v := range s.Data {
			data[k] = v
		}
	default:
		var cm corev1.ConfigMap
		if err := c.source.Get(ctx, key, &cm); absent(err) {
			sourced = false
		} else if err != nil {
			return nil, fmt.Errorf("read %s: %w", p.Source(), err)
		}
		for k, v := range cm.BinaryData {
			data[k] = v
		}
		for k, v := range cm.Data {
			data[k] = []byte(v)
		}
	}
	if sourced {
		var err error
		if certs, err = sourceCerts(data, p.Key); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Source(), err)
		}
	}
	if c.icpt != nil {
		ic, err := c.interceptCerts(ctx)
		if err != nil {
			return nil, err
		}
		certs = append(certs, ic...)
	}
	b, err := trust.Build(c.system, certs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Source(), err)
	}
	return &built{bundle: b, state: &TrustState{Digest: b.Digest(), Added: trust.Names(b.Added), Total: len(b.Certs)}}, nil
}

// interceptCerts reads the interception CA's certificates. A ConfigMap
// not there (yet: the gateway publishes it once it has loaded its CA; or
// deleted) adds none — the corporate CAs still reach the pods, and
// intercepted connections are refused by clients that do not trust the
// leaf, never accepted on a CA egret was not given; so does an empty one;
// one that does not parse keeps the last bundle.
func (c *TrustController) interceptCerts(ctx context.Context) ([]*x509.Certificate, error) {
	p := c.Policy
	var cm corev1.ConfigMap
	err := c.icpt.Get(ctx, types.NamespacedName{Namespace: p.InterceptNamespace, Name: p.InterceptName}, &cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	what := "the interception CA's ConfigMap " + p.InterceptNamespace + "/" + p.InterceptName
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	// The install creates it empty (the gateway may update it but not
	// create one): nothing published yet, like no ConfigMap.
	if len(cm.Data) == 0 && len(cm.BinaryData) == 0 {
		return nil, nil
	}
	data := map[string][]byte{}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	certs, err := sourceCerts(data, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return certs, nil
}

// sourceCerts reads the certificates of key, or of every key that holds
// PEM certificates (in key order) when key is "".
func sourceCerts(data map[string][]byte, key string) ([]*x509.Certificate, error) {
	if key != "" {
		v, ok := data[key]
		if !ok {
			return nil, fmt.Errorf("no key %q", key)
		}
		certs, err := trust.ParsePEM(v)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", key, err)
		}
		return certs, nil
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []*x509.Certificate
	for _, k := range keys {
		if !bytes.Contains(data[k], []byte("-----BEGIN CERTIFICATE-----")) {
			continue
		}
		certs, err := trust.ParsePEM(data[k])
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", k, err)
		}
		out = append(out, certs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no key holds PEM certificates (keys: %s)", strings.Join(keys, ", "))
	}
	return out, nil
}

func (c *TrustController) track(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	b, err := c.build(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "trust bundle not updated; pods keep the last one")
		return reconcile.Result{}, err
	}
	if old := c.current.Swap(b.state); old == nil || old.Digest != b.state.Digest {
		log.FromContext(ctx).Info("trust bundle", "digest", b.state.Digest, "certificates", b.state.Total, "corporateCAs", b.state.Added)
	}
	return reconcile.Result{}, nil
}

func (c *TrustController) sync(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	// A broken source stops the writes, not the removals.
	b, buildErr := c.build(ctx)
	var nss corev1.NamespaceList
	if err := c.Client.List(ctx, &nss); err != nil {
		return reconcile.Result{}, fmt.Errorf("list namespaces: %w", err)
	}
	var p12 []byte
	var errs []error
	for i := range nss.Items {
		ns := &nss.Items[i]
		if ns.DeletionTimestamp != nil {
			continue
		}
		if ns.Labels[discovery.InjectLabel] != discovery.InjectEnabled {
			if err := c.remove(ctx, ns.Name); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if buildErr != nil {
			continue
		}
		if err := c.write(ctx, ns.Name, b, &p12); err != nil {
			errs = append(errs, err)
		}
	}
	if buildErr == nil {
		c.reportForeign(ctx, &nss, b.state.Digest)
	}
	if buildErr != nil {
		errs = append([]error{buildErr}, errs...)
	}
	if len(errs) > 0 {
		return reconcile.Result{}, fmt.Errorf("sync %s: %w (and %d more)", TrustConfigMapName, errs[0], len(errs)-1)
	}
	return reconcile.Result{}, nil
}

// reportForeign logs each opted-in namespace whose bundle ConfigMap is
// not the bundle of digest egret wrote — made by someone else first, or
// changed since — once per change, and counts them.
func (c *TrustController) reportForeign(ctx context.Context, nss *corev1.NamespaceList, digest string) {
	if c.Bundles == nil {
		return
	}
	all, err := c.Bundles.List(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "trust bundles not checked")
		return
	}
	n := 0
	seen := map[string]string{}
	for i := range nss.Items {
		ns := &nss.Items[i]
		b := all[ns.Name]
		if ns.DeletionTimestamp != nil || ns.Labels[discovery.InjectLabel] != discovery.InjectEnabled || b == nil || b.Matches(digest) || b.updating() {
			continue
		}
		n++
		seen[ns.Name] = b.UID + "/" + b.PEMDigest
		if c.foreign[ns.Name] != seen[ns.Name] {
			log.FromContext(ctx).Error(nil, "a ConfigMap egret did not write holds the trust bundle's name: egret does not mount it into pods",
				"namespace", ns.Name, "name", TrustConfigMapName, "reason", b.why(digest))
		}
	}
	c.foreign = seen
	if c.Metrics != nil {
		c.Metrics.ForeignTrustBundles.Set(float64(n))
	}
}

func trustOurs(cm *corev1.ConfigMap) bool { return cm.Labels[discovery.ManagedByLabel] == "egret" }

// write creates or updates the ConfigMap in ns when its digest differs.
// The trust store is encoded once per sync, when a namespace needs it.
func (c *TrustController) write(ctx context.Context, ns string, b *built, p12 *[]byte) error {
	store := func() ([]byte, error) {
		if *p12 == nil {
			p, err := b.bundle.TrustStore(c.Rand)
			if err != nil {
				return nil, err
			}
			*p12 = p
		}
		return *p12, nil
	}
	var cm corev1.ConfigMap
	err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: TrustConfigMapName}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		p, err := store()
		if err != nil {
			return err
		}
		cm = newBundleConfigMap(ns, b, p)
		err = c.Client.Create(ctx, &cm)
		if apierrors.IsAlreadyExists(err) {
			log.FromContext(ctx).Info("configmap exists and is not managed by egret; not touching it", "namespace", ns, "name", TrustConfigMapName)
			return nil
		}
		if err != nil {
			return fmt.Errorf("create configmap %s/%s: %w", ns, TrustConfigMapName, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("get configmap %s/%s: %w", ns, TrustConfigMapName, err)
	case !trustOurs(&cm):
		return nil
	case cm.Annotations[TrustDigestAnnotation] == b.state.Digest && cm.Data[trust.BundleFile] != "" && len(cm.BinaryData[trust.TrustStoreFile]) > 0:
		return nil
	}
	p, err := store()
	if err != nil {
		return err
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[TrustDigestAnnotation] = b.state.Digest
	cm.Data = map[string]string{trust.BundleFile: string(b.bundle.PEM())}
	cm.BinaryData = map[string][]byte{trust.TrustStoreFile: p}
	if err := c.Client.Update(ctx, &cm); err != nil {
		return fmt.Errorf("update configmap %s/%s: %w", ns, TrustConfigMapName, err)
	}
	return nil
}

func newBundleConfigMap(ns string, b *built, p12 []byte) corev1.ConfigMap {
	return corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: TrustConfigMapName,
			Labels:      map[string]string{discovery.ManagedByLabel: "egret", discovery.PartOfLabel: "egret"},
			Annotations: map[string]string{TrustDigestAnnotation: b.state.Digest}},
		Data:       map[string]string{trust.BundleFile: string(b.bundle.PEM())},
		BinaryData: map[string][]byte{trust.TrustStoreFile: p12},
	}
}

// Create writes namespace ns's bundle ConfigMap now, when it has none: the
// webhook calls it for a pod that arrives before the writer (the leader,
// on its next sync) has. It only creates — an existing ConfigMap, egret's
// or not, is the writer's business. It builds the bundle from the same
// source caches as the tracker (waiting for their first sync) and returns
// what it built, which becomes Current when nothing was yet.
func (c *TrustController) Create(ctx context.Context, ns string) (*TrustState, error) {
	b, err := c.build(ctx)
	if err != nil {
		return nil, err
	}
	c.current.CompareAndSwap(nil, b.state)
	p, err := b.bundle.TrustStore(c.Rand)
	if err != nil {
		return nil, err
	}
	cm := newBundleConfigMap(ns, b, p)
	switch err := c.Client.Create(ctx, &cm); {
	case err == nil:
		log.FromContext(ctx).Info("trust bundle written for an arriving pod", "namespace", ns, "digest", b.state.Digest)
	case !apierrors.IsAlreadyExists(err):
		return nil, fmt.Errorf("create configmap %s/%s: %w", ns, TrustConfigMapName, err)
	}
	return b.state, nil
}

func (c *TrustController) remove(ctx context.Context, ns string) error {
	return discovery.RemoveOwnConfigMap(ctx, c.Client, ns, TrustConfigMapName, trustOurs)
}

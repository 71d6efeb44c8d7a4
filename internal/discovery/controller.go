package discovery

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Labels egret puts on the ConfigMaps it writes. The cache only holds
// ConfigMaps labelled PartOfLabel=egret, so the cluster-wide additions
// ConfigMap must carry that label too.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	PartOfLabel    = "app.kubernetes.io/part-of"
	egret          = "egret"
)

// CacheOptions restricts a manager's informer cache to what discovery and
// the webhook read: ConfigMaps labelled part-of=egret, the default/kubernetes
// Service and its EndpointSlices, and Nodes stripped to metadata and spec.
// Merge them into the manager's cache.Options.
func CacheOptions() cache.Options {
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{PartOfLabel: egret})},
			&corev1.Service{}: {
				Namespaces: map[string]cache.Config{"default": {}},
				Field:      fields.OneTermEqualSelector("metadata.name", "kubernetes"),
			},
			&discoveryv1.EndpointSlice{}: {
				Namespaces: map[string]cache.Config{"default": {}},
				Label:      labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: "kubernetes"}),
			},
			&corev1.Node{}: {Transform: func(o any) (any, error) {
				if n, ok := o.(*corev1.Node); ok {
					// Only the InternalIPs of the status are read.
					var addrs []corev1.NodeAddress
					for _, a := range n.Status.Addresses {
						if a.Type == corev1.NodeInternalIP {
							addrs = append(addrs, a)
						}
					}
					n.Status = corev1.NodeStatus{Addresses: addrs}
					n.ManagedFields = nil
					n.Annotations = nil
				}
				return o, nil
			}},
		},
	}
}

// Controller keeps the cluster NO_PROXY current. Every replica tracks it
// (Current); the elected leader writes ConfigMapName into every namespace
// labelled InjectLabel=InjectEnabled and deletes its own ConfigMap from
// namespaces that opt out. A ConfigMap of that name that egret did not create
// is left alone.
type Controller struct {
	// Options configure the computation.
	Options Options
	// Client reads from the manager cache and writes; set by SetupWithManager.
	Client client.Client
	// OnChange, if set, is called after the tracked value changed.
	OnChange func(*Result)
	// OwnNamespace, if set, gets the ConfigMap whatever its labels: egret's
	// own namespace, where the gateway reads it as its direct rules. (It is
	// never labelled for injection, so no webhook can match it.)
	OwnNamespace string
	// Kubelet, if set, is asked for the cluster domain (ReadClusterDomain);
	// the Corefile is read through the manager's API reader.
	Kubelet KubeletConfigz
	// DomainRefresh is how often the cluster domain is read again; 0
	// means 5 minutes.
	DomainRefresh time.Duration
	// Leader, if set, gates the ConfigMap writer: it runs in every replica
	// (not under the manager's leader election, which stops the whole
	// manager when the lease is lost) and writes only while Leader returns
	// true. Call Resync when leadership is won.
	Leader func() bool

	resync chan event.GenericEvent
	api    client.Reader

	current atomic.Pointer[Result]
	domain  atomic.Pointer[domainRead]
}

// domainRead is the cluster domain last read and when.
type domainRead struct {
	d     Domain
	warns []string
	at    time.Time
}

// Current returns the last computed NO_PROXY, or nil before the first
// computation. Safe for concurrent use.
func (c *Controller) Current() *Result { return c.current.Load() }

// the single work item: everything is recomputed from the cache each time.
var key = reconcile.Request{NamespacedName: types.NamespacedName{Name: "cluster-noproxy"}}

func always(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{key} }

// SetupWithManager registers the tracker (every replica) and the ConfigMap
// writer (leader only) with mgr.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if err := c.Options.Validate(); err != nil {
		return err
	}
	c.Client = mgr.GetClient()
	c.api = mgr.GetAPIReader()
	c.resync = make(chan event.GenericEvent, 1)
	enqueue := handler.EnqueueRequestsFromMapFunc(always)
	nodes := builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		return !ok1 || !ok2 || o.Spec.PodCIDR != n.Spec.PodCIDR || !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) ||
			!slices.Equal(internalIPs(o), internalIPs(n))
	}})
	additions := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
		return c.Options.Additions != "" && o.GetNamespace()+"/"+o.GetName() == c.Options.Additions
	}))
	watch := func(b *builder.Builder) *builder.Builder {
		return b.
			Watches(&corev1.Node{}, enqueue, nodes).
			Watches(&networkingv1.ServiceCIDR{}, enqueue).
			Watches(&corev1.Service{}, enqueue).
			Watches(&discoveryv1.EndpointSlice{}, enqueue).
			Watches(&corev1.ConfigMap{}, enqueue, additions)
	}
	err := watch(ctrl.NewControllerManagedBy(mgr).Named("noproxy-tracker").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), SkipNameValidation: ptr.To(true)})).
		Complete(reconcile.Func(c.track))
	if err != nil {
		return fmt.Errorf("set up noproxy tracker: %w", err)
	}
	ours := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetName() == ConfigMapName
	}))
	wopts := controller.Options{SkipNameValidation: ptr.To(true)}
	if c.Leader != nil {
		wopts.NeedLeaderElection = ptr.To(false)
	}
	err = watch(ctrl.NewControllerManagedBy(mgr).Named("noproxy-configmaps").
		WithOptions(wopts)).
		WatchesRawSource(source.Channel(c.resync, enqueue)).
		Watches(&corev1.Namespace{}, enqueue).
		Watches(&corev1.ConfigMap{}, enqueue, ours).
		Complete(reconcile.Func(c.sync))
	if err != nil {
		return fmt.Errorf("set up noproxy configmap writer: %w", err)
	}
	return nil
}

func (c *Controller) compute(ctx context.Context) (*Result, error) {
	in, err := Read(ctx, c.Client, c.Options)
	if err != nil {
		return nil, err
	}
	if c.Options.ClusterDomain == "" && c.api != nil {
		d := c.domain.Load()
		if d == nil || time.Since(d.at) >= c.domainRefresh() {
			dom, warns := ReadClusterDomain(ctx, c.api, c.Kubelet, sortedKeys(in.NodeAddrs))
			d = &domainRead{d: dom, warns: warns, at: time.Now()}
			c.domain.Store(d)
		}
		in.ClusterDomain, in.DomainWarnings = d.d, d.warns
	}
	return Compute(in, c.Options), nil
}

func (c *Controller) domainRefresh() time.Duration {
	if c.DomainRefresh > 0 {
		return c.DomainRefresh
	}
	return 5 * time.Minute
}

func (c *Controller) track(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	r, err := c.compute(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	old := c.current.Swap(r)
	if old == nil || old.Value() != r.Value() {
		log.FromContext(ctx).Info("cluster NO_PROXY", "value", r.Value(), "warnings", r.Warnings)
		if c.OnChange != nil {
			c.OnChange(r)
		}
		if old != nil {
			c.Resync() // a change the writer's watches may not see (the cluster domain)
		}
	}
	// The cluster domain has no watch: read it again now and then.
	return reconcile.Result{RequeueAfter: c.domainRefresh()}, nil
}

// ProxyKey holds the NO_PROXY for egret's own proxies (Result.ProxyValue):
// the gateway reads it (configMapKeyRef) as its direct rules.
const ProxyKey = "EGRET_NO_PROXY"

// ConfigMapData returns the data of ConfigMapName for a namespace.
func ConfigMapData(r *Result) map[string]string {
	v := r.Value()
	return map[string]string{"NO_PROXY": v, "no_proxy": v, ProxyKey: r.ProxyValue(), ExplainKey: string(r.Explain())}
}

// Resync makes the ConfigMap writer run again (after winning leadership).
// Safe to call before the manager starts and from any goroutine.
func (c *Controller) Resync() {
	select {
	case c.resync <- event.GenericEvent{Object: &corev1.ConfigMap{}}:
	default: // one pending is enough
	}
}

func (c *Controller) sync(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	if c.Leader != nil && !c.Leader() {
		return reconcile.Result{}, nil
	}
	lg := log.FromContext(ctx)
	cluster, err := c.compute(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	var nss corev1.NamespaceList
	if err := c.Client.List(ctx, &nss); err != nil {
		return reconcile.Result{}, fmt.Errorf("list namespaces: %w", err)
	}
	var errs []error
	for i := range nss.Items {
		ns := &nss.Items[i]
		if ns.DeletionTimestamp != nil {
			continue
		}
		if ns.Labels[InjectLabel] != InjectEnabled && ns.Name != c.OwnNamespace {
			if err := c.remove(ctx, ns.Name); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		adds, err := NamespaceAdditions(ns)
		if err != nil {
			lg.Error(err, "namespace additions ignored", "namespace", ns.Name)
		}
		if err := c.write(ctx, ns.Name, ConfigMapData(cluster.With(adds))); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return reconcile.Result{}, fmt.Errorf("sync %s: %w (and %d more)", ConfigMapName, errs[0], len(errs)-1)
	}
	return reconcile.Result{}, nil
}

func ours(cm *corev1.ConfigMap) bool { return cm.Labels[ManagedByLabel] == egret }

func (c *Controller) write(ctx context.Context, ns string, data map[string]string) error {
	var cm corev1.ConfigMap
	err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ConfigMapName}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConfigMapName,
				Labels: map[string]string{ManagedByLabel: egret, PartOfLabel: egret}},
			Data: data,
		}
		err := c.Client.Create(ctx, &cm)
		if apierrors.IsAlreadyExists(err) {
			// Present but not in the cache: not labelled as ours. Leave it.
			log.FromContext(ctx).Info("configmap exists and is not managed by egret; not touching it", "namespace", ns, "name", ConfigMapName)
			return nil
		}
		if err != nil {
			return fmt.Errorf("create configmap %s/%s: %w", ns, ConfigMapName, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("get configmap %s/%s: %w", ns, ConfigMapName, err)
	case !ours(&cm):
		return nil
	case maps.Equal(cm.Data, data):
		return nil
	}
	cm.Data = data
	if err := c.Client.Update(ctx, &cm); err != nil {
		return fmt.Errorf("update configmap %s/%s: %w", ns, ConfigMapName, err)
	}
	return nil
}

func (c *Controller) remove(ctx context.Context, ns string) error {
	return RemoveOwnConfigMap(ctx, c.Client, ns, ConfigMapName, ours)
}

// RemoveOwnConfigMap deletes ConfigMap ns/name if ours says egret made it
// (a ConfigMap of that name someone else made is left alone), guarded by
// its UID so a ConfigMap recreated meanwhile survives. Gone already is
// success.
func RemoveOwnConfigMap(ctx context.Context, cl client.Client, ns, name string, ours func(*corev1.ConfigMap) bool) error {
	var cm corev1.ConfigMap
	err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cm)
	if apierrors.IsNotFound(err) || (err == nil && !ours(&cm)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get configmap %s/%s: %w", ns, name, err)
	}
	if err := cl.Delete(ctx, &cm, client.Preconditions{UID: &cm.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete configmap %s/%s: %w", ns, name, err)
	}
	return nil
}

package netpol

import (
	"context"
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"egret.io/egret/internal/discovery"
)

// DefaultInterval is how often the policies are checked when nothing
// signals a change (a policy edited or deleted by hand, a Service's
// selector changed).
const DefaultInterval = time.Minute

// Controller keeps Name current in every namespace labelled
// Label=Enabled and deletes its own policy from namespaces that opt out. A
// NetworkPolicy of that name egret did not create is left alone. It reads
// the cluster ranges from Cluster (discovery's tracker) and the peers from
// their Services; it works only while Leader returns true.
type Controller struct {
	// Namespace is egret's own namespace (the gateway's default).
	Namespace string
	Options   Options
	// Cluster returns the current discovery result; nil before the first.
	Cluster func() *discovery.Result
	// Leader gates the writes; nil means always.
	Leader func() bool
	// Interval between passes (0: DefaultInterval).
	Interval time.Duration

	client client.Client
	api    client.Reader
	resync chan event.GenericEvent
}

var key = reconcile.Request{NamespacedName: types.NamespacedName{Name: "egress-policies"}}

// SetupWithManager registers the controller: it runs on namespace events,
// on Resync and every Interval.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Cluster == nil {
		return fmt.Errorf("netpol: no Cluster")
	}
	if err := c.Options.Validate(); err != nil {
		return err
	}
	c.client = mgr.GetClient()
	c.api = mgr.GetAPIReader()
	c.resync = make(chan event.GenericEvent, 1)
	enqueue := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{key}
	})
	err := ctrl.NewControllerManagedBy(mgr).Named("egress-policies").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), SkipNameValidation: ptr.To(true)}).
		WatchesRawSource(source.Channel(c.resync, enqueue)).
		Watches(&corev1.Namespace{}, enqueue).
		Complete(reconcile.Func(c.sync))
	if err != nil {
		return fmt.Errorf("set up the egress NetworkPolicy writer: %w", err)
	}
	return nil
}

// Resync makes the controller run again (discovery changed, leadership
// won). Safe from any goroutine, before the manager starts too.
func (c *Controller) Resync() {
	if c.resync == nil {
		return
	}
	select {
	case c.resync <- event.GenericEvent{Object: &corev1.Namespace{}}:
	default:
	}
}

func (c *Controller) interval() time.Duration {
	if c.Interval > 0 {
		return c.Interval
	}
	return DefaultInterval
}

func (c *Controller) sync(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	again := reconcile.Result{RequeueAfter: c.interval()}
	if c.Leader != nil && !c.Leader() {
		return again, nil
	}
	cluster := c.Cluster()
	if cluster == nil {
		return again, nil // not discovered yet; discovery's change signal brings us back
	}
	dns, gw, warns, err := ReadPeers(ctx, c.api, c.Namespace, c.Options)
	if err != nil {
		return reconcile.Result{}, err
	}
	lg := log.FromContext(ctx)
	in := Inputs{DNS: dns, Gateway: gw, Ranges: Ranges(cluster)}
	var nss corev1.NamespaceList
	if err := c.client.List(ctx, &nss); err != nil {
		return reconcile.Result{}, fmt.Errorf("list namespaces: %w", err)
	}
	// One list of egret's policies instead of a read per namespace.
	var mine networkingv1.NetworkPolicyList
	if err := c.api.List(ctx, &mine, client.MatchingLabels{discovery.ManagedByLabel: "egret"}); err != nil {
		return reconcile.Result{}, fmt.Errorf("list networkpolicies: %w", err)
	}
	have := map[string]*networkingv1.NetworkPolicy{}
	for i := range mine.Items {
		if mine.Items[i].Name == Name {
			have[mine.Items[i].Namespace] = &mine.Items[i]
		}
	}
	var errs []error
	wrote := 0
	for i := range nss.Items {
		ns := &nss.Items[i]
		if ns.DeletionTimestamp != nil {
			continue
		}
		if ns.Labels[Label] != Enabled {
			if np := have[ns.Name]; np != nil {
				if err := c.client.Delete(ctx, np, client.Preconditions{UID: &np.UID}); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("delete networkpolicy %s/%s: %w", ns.Name, Name, err))
				}
			}
			continue
		}
		changed, err := c.write(ctx, have[ns.Name], Render(ns.Name, in))
		if err != nil {
			errs = append(errs, err)
		}
		if changed {
			wrote++
		}
	}
	if wrote > 0 {
		lg.Info("egress NetworkPolicies written", "namespaces", wrote, "ranges", len(in.Ranges), "warnings", warns)
	}
	if len(errs) > 0 {
		return reconcile.Result{}, fmt.Errorf("sync NetworkPolicy %s: %w (and %d more)", Name, errs[0], len(errs)-1)
	}
	return again, nil
}

func ours(np *networkingv1.NetworkPolicy) bool {
	return np.Labels[discovery.ManagedByLabel] == "egret"
}

// write creates want, or updates np (egret's, nil when absent) to it; it
// reports whether it changed anything. A policy of that name someone else
// made is left alone.
func (c *Controller) write(ctx context.Context, np, want *networkingv1.NetworkPolicy) (bool, error) {
	if np == nil {
		err := c.client.Create(ctx, want)
		if apierrors.IsAlreadyExists(err) {
			log.FromContext(ctx).V(1).Info("networkpolicy exists and is not managed by egret; not touching it", "namespace", want.Namespace, "name", Name)
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("create networkpolicy %s/%s: %w", want.Namespace, Name, err)
		}
		return true, nil
	}
	if reflect.DeepEqual(np.Spec, want.Spec) && np.Annotations[SourcesAnnotation] == want.Annotations[SourcesAnnotation] {
		return false, nil
	}
	np.Spec = want.Spec
	if np.Annotations == nil {
		np.Annotations = map[string]string{}
	}
	np.Annotations[SourcesAnnotation] = want.Annotations[SourcesAnnotation]
	if err := c.client.Update(ctx, np); err != nil {
		return false, fmt.Errorf("update networkpolicy %s/%s: %w", np.Namespace, Name, err)
	}
	return true, nil
}

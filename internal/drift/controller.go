package drift

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/stamp"
)

// Defaults of Controller's timings.
const (
	DefaultInterval       = 30 * time.Second
	DefaultRolloutTimeout = 10 * time.Minute
	minInterval           = 2 * time.Second
	// republish is how often an unchanged report is written again (its
	// Updated time shows the controller is alive).
	republish = 5 * time.Minute
)

// Controller compares the injected pods with what the webhook injects now,
// publishes the Report (ConfigMap ConfigMapName in Namespace, and
// Metrics), and restarts the stale workloads that opted in. Only the
// elected leader works (Leader); every replica may run it.
type Controller struct {
	// Namespace is egret's own namespace (the Report's ConfigMap).
	Namespace string
	// Identity names this replica in the Report.
	Identity string
	// Expect is what the webhook would inject now; required.
	Expect Expect
	// Leader gates the work; nil means always.
	Leader func() bool
	// Mode is the restart mode (ModeOn, ModeDryRun, ModeOff); "" is
	// ModeOn. SetupWithManager lowers it to ModeNotPermitted when RBAC
	// forbids patching workloads.
	Mode string
	// Metrics, if set, receives the report's counts and the restarts.
	Metrics *metrics.Webhook
	// Interval between comparisons (0: DefaultInterval); RolloutTimeout is
	// how long a restart may take before restarts pause (0:
	// DefaultRolloutTimeout).
	Interval, RolloutTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	client   client.Client // writes (workload patches, the ConfigMap)
	api      client.Reader // uncached reads
	pods     cache.Cache   // egret-labelled pods, metadata only
	recorder record.EventRecorder
	resync   chan event.GenericEvent

	mu        sync.Mutex
	last      *Report
	published time.Time
	lastRun   time.Time
	once      map[string]bool // states already counted (countOnce)
}

var key = reconcile.Request{NamespacedName: types.NamespacedName{Name: "drift"}}

// podMeta is the metadata-only object the pod cache holds.
func podMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return m
}

// SetupWithManager checks what RBAC allows (listing pods is required:
// without it the controller is not set up and an error says so; without
// patching workloads restarts are off), and registers the controller.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if c.Expect == nil {
		return fmt.Errorf("drift: no Expect")
	}
	switch c.Mode {
	case "":
		c.Mode = ModeOn
	case ModeOn, ModeDryRun, ModeOff:
	default:
		return fmt.Errorf("--stale-restart %q: want on, dry-run or off", c.Mode)
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	ctx := context.Background()
	if ok, why := allowed(ctx, cs, "list", "", "pods", ""); !ok {
		return fmt.Errorf("drift report off: the webhook may not list pods (%s); grant it get/list/watch on pods", why)
	}
	if c.Mode != ModeOff {
		for _, res := range []string{"deployments", "statefulsets", "daemonsets"} {
			if ok, _ := allowed(ctx, cs, "patch", "apps", res, ""); !ok {
				c.Mode = ModeNotPermitted
			}
		}
	}
	sel := labels.NewSelector()
	req, err := labels.NewRequirement(stamp.Label, selection.Exists, nil)
	if err != nil {
		return err
	}
	sel = sel.Add(*req)
	c.pods, err = cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		ByObject: map[client.Object]cache.ByObject{podMeta(): {Label: sel, Transform: func(o any) (any, error) {
			if m, ok := o.(*metav1.PartialObjectMetadata); ok {
				m.ManagedFields = nil
			}
			return o, nil
		}}},
	})
	if err != nil {
		return fmt.Errorf("drift pod cache: %w", err)
	}
	if err := mgr.Add(c.pods); err != nil {
		return err
	}
	c.client, c.api = mgr.GetClient(), mgr.GetAPIReader()
	c.recorder = mgr.GetEventRecorderFor("egret-drift")
	c.resync = make(chan event.GenericEvent, 1)
	enqueue := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{key} })
	return ctrl.NewControllerManagedBy(mgr).Named("drift").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), SkipNameValidation: ptr.To(true)}).
		WatchesRawSource(source.Kind(c.pods, client.Object(podMeta()), enqueue)).
		WatchesRawSource(source.Channel(c.resync, enqueue)).
		Complete(reconcile.Func(c.reconcile))
}

// Resync makes the controller compare again now (after winning the
// lease, or a change of what the webhook injects). Safe from any
// goroutine.
func (c *Controller) Resync() {
	select {
	case c.resync <- event.GenericEvent{Object: podMeta()}:
	default:
	}
}

// Last returns the last Report, or nil. Safe for concurrent use.
func (c *Controller) Last() *Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *Controller) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Controller) interval() time.Duration {
	if c.Interval > 0 {
		return c.Interval
	}
	return DefaultInterval
}

func (c *Controller) reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	if c.Leader != nil && !c.Leader() {
		return reconcile.Result{}, nil
	}
	c.mu.Lock()
	wait := minInterval - time.Since(c.lastRun)
	c.mu.Unlock()
	if wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	r, err := c.compare(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	prev := c.previous(ctx)
	r.Restarts = c.restart(ctx, r, prev)
	r.Updated, r.Leader = c.now().UTC(), c.Identity
	c.observe(r)
	if err := c.publish(ctx, r, prev); err != nil {
		return reconcile.Result{}, err
	}
	c.mu.Lock()
	c.last, c.lastRun = r, time.Now()
	c.mu.Unlock()
	return reconcile.Result{RequeueAfter: c.interval()}, nil
}

// compare lists the labelled pods, finds their workloads and compares.
func (c *Controller) compare(ctx context.Context) (*Report, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := c.pods.List(ctx, l); err != nil {
		return nil, fmt.Errorf("list injected pods: %w", err)
	}
	owners := map[types.NamespacedName]Ref{} // ReplicaSet → its owner
	var pods []PodInfo
	for i := range l.Items {
		m := &l.Items[i]
		if m.DeletionTimestamp != nil {
			continue
		}
		pods = append(pods, PodInfo{Namespace: m.Namespace, Name: m.Name, Annotations: m.Annotations,
			Workload: c.workloadOf(ctx, m, owners), Created: m.CreationTimestamp.Time})
	}
	nss := map[string]*corev1.Namespace{}
	expect := func(ctx context.Context, ns string, s stamp.Stamp, ann map[string]string) (stamp.Current, bool) {
		n, ok := nss[ns]
		if !ok {
			n = &corev1.Namespace{}
			if err := c.client.Get(ctx, types.NamespacedName{Name: ns}, n); err != nil {
				n = nil
			}
			nss[ns] = n
		}
		if n == nil {
			return stamp.Current{}, false
		}
		return c.Expect(ctx, n, s, ann)
	}
	return Compare(ctx, pods, expect), nil
}

// workloadOf follows a pod's controller: a ReplicaSet to its Deployment
// (read once per comparison), a StatefulSet, DaemonSet or Job as it is;
// a pod without one is its own workload.
func (c *Controller) workloadOf(ctx context.Context, m *metav1.PartialObjectMetadata, owners map[types.NamespacedName]Ref) Ref {
	own := metav1.GetControllerOf(m)
	if own == nil {
		return Ref{Kind: "Pod", Namespace: m.Namespace, Name: m.Name}
	}
	if own.Kind != "ReplicaSet" {
		return Ref{Kind: own.Kind, Namespace: m.Namespace, Name: own.Name}
	}
	k := types.NamespacedName{Namespace: m.Namespace, Name: own.Name}
	if r, ok := owners[k]; ok {
		return r
	}
	r := Ref{Kind: "ReplicaSet", Namespace: m.Namespace, Name: own.Name}
	rs := &metav1.PartialObjectMetadata{}
	rs.SetGroupVersionKind(schemeApps("ReplicaSet"))
	if err := c.api.Get(ctx, k, rs); err == nil {
		if o := metav1.GetControllerOf(rs); o != nil && o.Kind == "Deployment" {
			r = Ref{Kind: "Deployment", Namespace: m.Namespace, Name: o.Name}
		}
	}
	owners[k] = r
	return r
}

// previous is the last report: this replica's, or the one a former leader
// published.
func (c *Controller) previous(ctx context.Context) *Report {
	if r := c.Last(); r != nil {
		return r
	}
	var cm corev1.ConfigMap
	if err := c.api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: ConfigMapName}, &cm); err != nil {
		return nil
	}
	r, err := ParseReport(cm.Data[ReportKey])
	if err != nil {
		return nil
	}
	return r
}

// observe sets the metrics from r.
func (c *Controller) observe(r *Report) {
	m := c.Metrics
	if m == nil {
		return
	}
	m.InjectedPods.Set(float64(r.InjectedPods))
	for _, p := range stamp.Parts {
		m.StalePods.WithLabelValues(string(p)).Set(float64(r.ByPart[p]))
	}
	m.StaleWorkloads.Set(float64(len(r.Workloads) + r.MoreWorkloads))
	m.DriftSync.Set(float64(r.Updated.Unix()))
}

// publish writes r into the ConfigMap when it changed (or every
// republish, to show it is alive).
func (c *Controller) publish(ctx context.Context, r, prev *Report) error {
	if prev != nil && time.Since(c.published) < republish {
		a, b := *r, *prev
		a.Updated, b.Updated = time.Time{}, time.Time{}
		if a.Encode() == b.Encode() {
			return nil
		}
	}
	data := map[string]string{ReportKey: r.Encode()}
	var cm corev1.ConfigMap
	err := c.api.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: ConfigMapName}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: ConfigMapName,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "egret", "app.kubernetes.io/part-of": "egret"}}, Data: data}
		err = c.client.Create(ctx, &cm)
	case err == nil:
		cm.Data = data
		err = c.client.Update(ctx, &cm)
	}
	if err != nil {
		return fmt.Errorf("publish configmap %s/%s: %w", c.Namespace, ConfigMapName, err)
	}
	c.published = time.Now()
	return nil
}

// restart moves the restarter one step: finish or time out the current
// restart, else plan and start the next one.
func (c *Controller) restart(ctx context.Context, r, prev *Report) Restarts {
	lg := log.FromContext(ctx)
	st := Restarts{Mode: c.Mode}
	if prev != nil {
		st.Current, st.Recent = prev.Restarts.Current, prev.Restarts.Recent
	}
	now := c.now().UTC()
	if cur := st.Current; cur != nil {
		w, err := getWorkload(ctx, c.api, cur.Ref)
		switch {
		case apierrors.IsNotFound(err):
			cur.Finished, cur.Error = now, "the workload is gone"
			st.Recent, st.Current = pushRecent(st.Recent, *cur), nil
		case err != nil:
			st.Paused = fmt.Sprintf("cannot read %s: %v", cur.Ref, err)
		case w.notReady == "":
			cur.Finished = now
			st.Recent, st.Current = pushRecent(st.Recent, *cur), nil
			lg.Info("restart done", "workload", cur.Ref.String())
		case now.Sub(cur.Started) > c.rolloutTimeout():
			st.Paused = fmt.Sprintf("the restart of %s has not finished after %s (%s): no other workload is restarted until it does",
				cur.Ref, now.Sub(cur.Started).Round(time.Second), w.notReady)
		}
	}
	var targets []Target
	for i := range r.Workloads {
		wl := &r.Workloads[i]
		t, ok := c.target(ctx, wl, st.Recent)
		if !ok {
			continue
		}
		wl.Restart = t.OptIn
		targets = append(targets, t)
	}
	chosen, states := Plan(c.Mode, targets, now)
	for i, t := range targets {
		for j := range r.Workloads {
			if r.Workloads[j].Ref == t.Ref {
				r.Workloads[j].State = states[i]
			}
		}
		switch {
		case states[i] == StateDryRun:
			c.countOnce("dry_run", t, "would restart a stale workload (dry run)")
		case strings.HasPrefix(states[i], "blocked: "):
			c.countOnce("blocked_pdb", t, "a PodDisruptionBudget holds the restart of a stale workload")
		}
	}
	if st.Current != nil {
		// One at a time: the plan waits.
		for j := range r.Workloads {
			if r.Workloads[j].State == StateRestarting {
				r.Workloads[j].State = StateQueued
			}
			if r.Workloads[j].Ref == st.Current.Ref {
				r.Workloads[j].State = StateRestarting
			}
		}
		return st
	}
	if chosen < 0 {
		return st
	}
	t := targets[chosen]
	rs := Restart{Ref: t.Ref, Parts: t.Parts, Started: now, Result: "restarted"}
	if err := c.patch(ctx, t.Ref, now, t.Parts); err != nil {
		rs.Result, rs.Error, rs.Finished = "failed", err.Error(), now
		st.Recent = pushRecent(st.Recent, rs)
		c.count("failed")
		lg.Error(err, "restart failed", "workload", t.Ref.String())
		return st
	}
	c.count("restarted")
	lg.Info("restarting a stale workload", "workload", t.Ref.String(), "parts", t.Parts)
	st.Current = &rs
	return st
}

// target reads what Plan needs of one stale workload; false when it did
// not opt in (nothing else is read then).
func (c *Controller) target(ctx context.Context, wl *Workload, recent []Restart) (Target, bool) {
	t := Target{Workload: *wl}
	var ns corev1.Namespace
	nsOpt := ""
	if err := c.client.Get(ctx, types.NamespacedName{Name: wl.Namespace}, &ns); err == nil {
		nsOpt, _ = ParseOptIn(ns.Annotations[RestartAnnotation])
	}
	if !wl.Restartable() {
		if nsOpt == "" {
			return t, false
		}
		t.OptIn, t.Unrestartable = nsOpt, "a "+wl.Kind+" is not restarted by changing a pod template; delete its pods yourself"
		return t, true
	}
	w, err := getWorkload(ctx, c.api, wl.Ref)
	if err != nil {
		if nsOpt == "" {
			return t, false
		}
		t.OptIn, t.NotReady = nsOpt, "cannot read it: "+err.Error()
		return t, true
	}
	t.OptIn = nsOpt
	if v, ok := w.obj.GetAnnotations()[RestartAnnotation]; ok {
		o, err := ParseOptIn(v)
		if err != nil {
			c.recorder.Event(w.obj, corev1.EventTypeWarning, "EgretRestartOptIn", err.Error())
		}
		t.OptIn = o
	}
	if t.OptIn == "" {
		return t, false
	}
	t.Unrestartable, t.NotReady, t.MaxUnavailable = w.unrestartable, w.notReady, w.maxUnavailable
	if t.PDBs, err = pdbsFor(ctx, c.api, w); err != nil {
		t.NotReady = err.Error()
	}
	for _, r := range recent {
		if r.Ref == wl.Ref && r.Result == "restarted" {
			t.LastRestart = r.Started
			break
		}
	}
	return t, true
}

// patch restarts ref and records an Event on it.
func (c *Controller) patch(ctx context.Context, ref Ref, now time.Time, parts []stamp.Part) error {
	w, err := getWorkload(ctx, c.api, ref)
	if err != nil {
		return err
	}
	if err := c.client.Patch(ctx, w.obj, restartPatch(now, parts)); err != nil {
		return fmt.Errorf("patch %s: %w", ref, err)
	}
	c.recorder.Eventf(w.obj, corev1.EventTypeNormal, "EgretRestart", "restarted by egret: its pods were injected with values that changed since (%v)", parts)
	return nil
}

func (c *Controller) rolloutTimeout() time.Duration {
	if c.RolloutTimeout > 0 {
		return c.RolloutTimeout
	}
	return DefaultRolloutTimeout
}

func (c *Controller) count(result string) {
	if c.Metrics != nil {
		c.Metrics.Restarts.WithLabelValues(result).Inc()
	}
}

// countOnce counts result for t once per workload, result and set of
// parts (a state that holds for many comparisons is one event), and logs
// it.
func (c *Controller) countOnce(result string, t Target, msg string) {
	k := fmt.Sprint(result, t.Ref, t.Parts)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.once == nil || len(c.once) > 10000 {
		c.once = map[string]bool{}
	}
	if !c.once[k] {
		c.once[k] = true
		c.count(result)
		log.Log.WithName("drift").Info(msg, "workload", t.Ref.String(), "parts", t.Parts)
	}
}

func pushRecent(recent []Restart, r Restart) []Restart {
	out := append([]Restart{r}, recent...)
	if len(out) > maxRecent {
		out = out[:maxRecent]
	}
	return slices.Clip(out)
}

// allowed asks the API server whether this process may verb resource.
func allowed(ctx context.Context, cs kubernetes.Interface, verb, group, resource, ns string) (bool, string) {
	rev, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: group, Resource: resource, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err.Error()
	}
	if !rev.Status.Allowed {
		return false, "forbidden by RBAC"
	}
	return true, ""
}

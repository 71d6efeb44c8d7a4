package policy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// Watcher keeps an Engine in step with the EgressPolicies and
// ClusterEgressPolicies of the cluster and writes each one's Accepted
// condition.
type Watcher struct {
	// Client reads the policies and writes their status; required.
	Client dynamic.Interface
	// Engine receives the policies; required.
	Engine *Engine
	// Logger receives status write failures; nil discards them.
	Logger *slog.Logger
	// NoStatus skips writing status (a read-only caller).
	NoStatus bool

	informers [2]cache.SharedIndexInformer
	status    statusQueue
	held      heldBytes
}

// heldMax bounds the specs the caches keep: the total limit, and room for
// older policies that arrive after newer ones to take their place.
const heldMax = MaxTotalBytes + MaxTotalBytes/4

// oversizeKey marks an object whose spec the informer's cache does not
// keep; its value says why.
const oversizeKey = "egret.io/held-back"

// heldBytes bounds what the informers' caches hold of the policies: the
// spec of an object beyond MaxPolicyBytes, or one that would take the
// specs held past heldMax, is dropped as the object arrives
// (the engine refuses it: LimitExceeded), and so are the fields the
// gateway never reads (managedFields, annotations).
type heldBytes struct {
	mu    sync.Mutex
	sizes map[string]int
	total int
}

func (h *heldBytes) transform(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	u.SetAnnotations(nil)
	key := u.GetNamespace() + "/" + u.GetName()
	size := 0
	if spec, ok := u.Object["spec"].(map[string]any); ok {
		size = unstructuredSize(spec)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sizes == nil {
		h.sizes = map[string]int{}
	}
	h.total -= h.sizes[key]
	delete(h.sizes, key)
	if u.GetDeletionTimestamp() != nil {
		return u, nil
	}
	var why string
	switch {
	case size > MaxPolicyBytes:
		why = fmt.Sprintf("the policy's size is %d bytes, more than the limit of %d bytes per policy (hosts, suffixes and cidrs as written, 64 per rule)", size, MaxPolicyBytes)
	case h.total+size > heldMax:
		why = fmt.Sprintf("the gateway holds %d bytes of policies and this one's %d would pass %d, its limit of %d (total policy size) and a quarter; it is read again when it changes or the gateway restarts", h.total, size, heldMax, MaxTotalBytes)
	}
	if why != "" {
		u.Object["spec"] = map[string]any{}
		u.Object[oversizeKey] = why
		return u, nil
	}
	h.sizes[key] = size
	h.total += size
	return u, nil
}

// unstructuredSize is the Size of a spec as decoded by the informer.
func unstructuredSize(spec map[string]any) int {
	rules, _ := spec["egress"].([]any)
	n := 0
	for _, r := range rules {
		n += 64
		m, _ := r.(map[string]any)
		for _, f := range []string{"hosts", "suffixes", "cidrs"} {
			vs, _ := m[f].([]any)
			for _, v := range vs {
				if s, ok := v.(string); ok {
					n += len(s)
				}
			}
		}
	}
	return n
}

// Start starts the informers and returns once both have listed (the
// engine holds every policy), or with an error after wait. They run until
// ctx ends.
func (w *Watcher) Start(ctx context.Context, wait time.Duration) error {
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	w.status.w = w
	w.status.wake = make(chan struct{}, 1)
	if !w.NoStatus {
		w.Engine.Changed = w.status.add
		go w.status.run(ctx)
	}
	for i, gvr := range []schema.GroupVersionResource{EgressPolicies, ClusterEgressPolicies} {
		cluster := i == 1
		inf := dynamicinformer.NewFilteredDynamicInformer(w.Client, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
		if err := inf.SetTransform(w.held.transform); err != nil {
			return err
		}
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.set(obj, cluster) },
			UpdateFunc: func(_, obj any) { w.set(obj, cluster) },
			DeleteFunc: func(obj any) {
				if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				if u, ok := obj.(*unstructured.Unstructured); ok {
					w.Engine.Delete(u.GetNamespace(), u.GetName(), cluster)
				}
			},
		})
		if err != nil {
			return err
		}
		w.informers[i] = inf
		go inf.RunWithContext(ctx)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), w.informers[0].HasSynced, w.informers[1].HasSynced) {
		return fmt.Errorf("egress policies not listed after %s: is the EgressPolicy CRD installed (deploy/policy), and may this service account list it?", wait)
	}
	return nil
}

// set hands the policy in obj to the engine.
func (w *Watcher) set(obj any, cluster bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	w.Engine.Set(FromUnstructured(u), cluster)
}

// FromUnstructured reads a policy object. One that does not convert (the
// CRD's schema normally prevents it) keeps its name and gets an invalid
// mode, so it compiles to a policy that denies everything.
func FromUnstructured(u *unstructured.Unstructured) *EgressPolicy {
	var p EgressPolicy
	if why, ok := u.Object[oversizeKey].(string); ok {
		p = EgressPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(), Generation: u.GetGeneration(), UID: u.GetUID(), CreationTimestamp: u.GetCreationTimestamp()}}
		p.Spec.Mode = heldBackMode + why
		return &p
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		p = EgressPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(), Generation: u.GetGeneration()}}
		p.Spec.Mode = "unreadable: " + err.Error()
	}
	return &p
}

// ToUnstructured is the object of a policy (cluster: a
// ClusterEgressPolicy), for the dynamic client.
func ToUnstructured(p *EgressPolicy, cluster bool) (*unstructured.Unstructured, error) {
	q := *p
	q.APIVersion, q.Kind = Group+"/"+Version, kindOf(cluster)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&q)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Condition is the Accepted condition for c.
func Condition(c *Compiled) metav1.Condition {
	cond := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonValid,
		Message: "in force", ObservedGeneration: c.Generation}
	if c.Mode == Report {
		cond.Message = "in force, report-only: nothing is refused, what would be is logged as would_deny"
	}
	if c.Err != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, c.Reason
		cond.Message = "not accepted, so it denies everything to the pods it selects: " + oneLine(c.Err.Error())
		if c.Reason == ReasonNotDefault {
			cond.Message = "not used: " + oneLine(c.Err.Error())
		}
	}
	return cond
}

func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\n' {
			b[i] = ';'
		}
	}
	if len(b) > 1000 {
		b = append(b[:1000], "..."...)
	}
	return string(b)
}

// statusQueue writes Accepted conditions in the background, the latest
// compilation of each policy, skipping writes that change nothing (every
// gateway replica computes the same status).
type statusQueue struct {
	w    *Watcher
	mu   sync.Mutex
	todo map[string]*Compiled
	wake chan struct{}
}

func (q *statusQueue) add(c *Compiled) {
	q.mu.Lock()
	if q.todo == nil {
		q.todo = map[string]*Compiled{}
	}
	q.todo[c.Key] = c
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *statusQueue) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		q.mu.Lock()
		todo := q.todo
		q.todo = nil
		q.mu.Unlock()
		for _, c := range todo {
			if err := q.w.writeStatus(ctx, c); err != nil && ctx.Err() == nil {
				q.w.Logger.Warn("policy status not written", "policy", c.Key, "error", err.Error())
			}
		}
	}
}

// writeStatus sets c's Accepted condition on its object, if it differs.
func (w *Watcher) writeStatus(ctx context.Context, c *Compiled) error {
	i := 0
	key := c.Namespace + "/" + c.Name
	if c.Cluster {
		i, key = 1, c.Name
	}
	obj, ok, err := w.informers[i].GetStore().GetByKey(key)
	if err != nil || !ok {
		return err // deleted meanwhile
	}
	u := obj.(*unstructured.Unstructured)
	if u.GetGeneration() != c.Generation {
		return nil // a newer compilation follows
	}
	var st Status
	if m, ok := u.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(m, &st)
	}
	want := st
	want.Conditions = append([]metav1.Condition(nil), st.Conditions...)
	want.ObservedGeneration = c.Generation
	meta.SetStatusCondition(&want.Conditions, Condition(c))
	if equality.Semantic.DeepEqual(st, want) {
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&want)
	if err != nil {
		return err
	}
	u = u.DeepCopy()
	delete(u.Object, oversizeKey)
	u.Object["status"] = m
	gvr := EgressPolicies
	var rc dynamic.ResourceInterface = w.Client.Resource(gvr).Namespace(c.Namespace)
	if c.Cluster {
		rc = w.Client.Resource(ClusterEgressPolicies)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = rc.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

package identity

import (
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unique"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// Pod is what the gateway keeps of a pod. It is immutable: an update
// replaces it.
type Pod struct {
	Namespace      string
	Name           string
	UID            string
	ServiceAccount string
	// Labels is shared by every pod of the namespace with the same labels.
	Labels *LabelSet
	// ips are the addresses the pod claims: set while it is live (not
	// hostNetwork, not Succeeded or Failed).
	ips [2]netip.Addr
}

// Addrs returns the addresses the pod claims (none for a hostNetwork or
// finished pod).
func (p *Pod) Addrs() []netip.Addr {
	n := 0
	for n < len(p.ips) && p.ips[n].IsValid() {
		n++
	}
	return p.ips[:n]
}

// LabelSet is a namespace and a set of labels, shared by the pods that
// have both. Its Labels must not be modified.
type LabelSet struct {
	Namespace string
	Labels    labels.Set
	key       string
	refs      int // pods using it; guarded by Pods.mu
	cache     atomic.Pointer[Cached]
}

// Cached is what a consumer attached to a LabelSet: a value computed for
// one generation of the consumer's own state (package policy keeps the
// pods' effective policy here).
type Cached struct {
	Gen   uint64
	Value any
}

// Cached returns what was last stored, or nil.
func (ls *LabelSet) Cached() *Cached { return ls.cache.Load() }

// Cache stores c (safe for concurrent use; the last store wins).
func (ls *LabelSet) Cache(c *Cached) { ls.cache.Store(c) }

type podKey struct{ ns, name string }

// Pods indexes pods by address and by name. It implements the store a
// client-go Reflector feeds (Add, Update, Delete, Replace, Resync), so the
// index is the only copy of the pods the gateway keeps. Lookups are safe
// for concurrent use with updates; updates come from one goroutine at a
// time.
type Pods struct {
	mu        sync.RWMutex
	byName    map[podKey]*Pod
	byIP      map[addrKey]*Pod // the owner, or conflicted
	conflicts map[addrKey][]*Pod
	sets      map[string]*LabelSet
	nsPods    map[string]int // pods indexed per namespace
	synced    atomic.Bool
}

// addrKey is an address as a map key (hashed faster than a netip.Addr).
type addrKey [16]byte

func keyOf(a netip.Addr) addrKey { return a.Unmap().WithZone("").As16() }

// conflicted marks an address two live pods claim.
var conflicted = &Pod{Name: "(conflicted)"}

// NewPods returns an empty index.
func NewPods() *Pods {
	return &Pods{byName: map[podKey]*Pod{}, byIP: map[addrKey]*Pod{},
		conflicts: map[addrKey][]*Pod{}, sets: map[string]*LabelSet{}, nsPods: map[string]int{}}
}

var _ cache.ReflectorStore = (*Pods)(nil)

// ByAddr returns the pod that owns address a: the one live pod claiming
// it. An address nobody claims, or that two pods claim (a reused IP while
// the old pod's end is not yet seen), has no owner.
func (ps *Pods) ByAddr(a netip.Addr) *Pod {
	k := keyOf(a)
	ps.mu.RLock()
	p := ps.byIP[k]
	ps.mu.RUnlock()
	if p == conflicted {
		return nil
	}
	return p
}

// ByName returns the pod namespace/name, or nil.
func (ps *Pods) ByName(namespace, name string) *Pod {
	ps.mu.RLock()
	p := ps.byName[podKey{namespace, name}]
	ps.mu.RUnlock()
	return p
}

// HasNamespace reports whether a pod of namespace ns is indexed: the
// gateway's evidence that ns names a namespace (a destination "name.ns" is
// a Service there, as a pod's resolver would find it).
func (ps *Pods) HasNamespace(ns string) bool {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return ps.nsPods[ns] > 0
}

// Len returns the number of pods indexed.
func (ps *Pods) Len() int {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return len(ps.byName)
}

// LabelSets returns the number of distinct namespace and label sets.
func (ps *Pods) LabelSets() int {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return len(ps.sets)
}

// Synced reports whether the index has received a full list.
func (ps *Pods) Synced() bool { return ps.synced.Load() }

// Add adds or replaces a pod (a *corev1.Pod).
func (ps *Pods) Add(obj any) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.put(pod)
	return nil
}

// Update is Add.
func (ps *Pods) Update(obj any) error { return ps.Add(obj) }

// Delete removes a pod (a *corev1.Pod, or the tombstone of one).
func (ps *Pods) Delete(obj any) error {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if old := ps.byName[podKey{pod.Namespace, pod.Name}]; old != nil {
		ps.remove(old)
	}
	return nil
}

// Replace makes the index hold exactly the pods of list (a relist).
func (ps *Pods) Replace(list []any, _ string) error {
	fresh := NewPods()
	for _, obj := range list {
		if pod, ok := obj.(*corev1.Pod); ok {
			fresh.put(pod)
		}
	}
	ps.mu.Lock()
	ps.byName, ps.byIP, ps.conflicts, ps.sets, ps.nsPods = fresh.byName, fresh.byIP, fresh.conflicts, fresh.sets, fresh.nsPods
	ps.mu.Unlock()
	ps.synced.Store(true)
	return nil
}

// Resync does nothing.
func (ps *Pods) Resync() error { return nil }

// put adds or replaces pod; ps.mu is held.
func (ps *Pods) put(pod *corev1.Pod) {
	k := podKey{intern(pod.Namespace), pod.Name}
	old := ps.byName[k]
	p := &Pod{Namespace: k.ns, Name: pod.Name, UID: string(pod.UID), ServiceAccount: intern(pod.Spec.ServiceAccountName)}
	if old != nil && old.UID == p.UID {
		p.Name, p.UID = old.Name, old.UID // keep the strings already held
	}
	k.name = p.Name
	if old != nil && sameLabels(old.Labels.Labels, pod.Labels) {
		p.Labels = old.Labels
		p.Labels.refs++
	} else {
		p.Labels = ps.labelSet(k.ns, pod.Labels)
	}
	if live(pod) {
		n := 0
		for _, ip := range pod.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil && n < len(p.ips) {
				p.ips[n] = a.Unmap().WithZone("")
				n++
			}
		}
		if n == 0 && pod.Status.PodIP != "" {
			if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
				p.ips[0] = a.Unmap().WithZone("")
			}
		}
	}
	if old != nil {
		ps.remove(old)
	}
	ps.byName[k] = p
	ps.nsPods[k.ns]++
	for _, a := range p.Addrs() {
		ps.claim(a, p)
	}
}

// live reports whether a pod holds its addresses: it shares none with its
// node and has not finished (the network plugin may give a finished pod's
// address to a new one).
func live(pod *corev1.Pod) bool {
	if pod.Spec.HostNetwork {
		return false
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return false
	}
	return true
}

// remove takes p out of the index; ps.mu is held.
func (ps *Pods) remove(p *Pod) {
	k := podKey{p.Namespace, p.Name}
	if ps.byName[k] == p {
		delete(ps.byName, k)
		if ps.nsPods[k.ns]--; ps.nsPods[k.ns] <= 0 {
			delete(ps.nsPods, k.ns)
		}
	}
	for _, a := range p.Addrs() {
		ps.release(a, p)
	}
	if ls := p.Labels; ls != nil {
		ls.refs--
		if ls.refs <= 0 {
			delete(ps.sets, ls.key)
		}
	}
}

func (ps *Pods) claim(addr netip.Addr, p *Pod) {
	a := keyOf(addr)
	cur, ok := ps.byIP[a]
	switch {
	case !ok:
		ps.byIP[a] = p
	case cur == conflicted:
		ps.conflicts[a] = append(ps.conflicts[a], p)
	case cur != p:
		ps.conflicts[a] = []*Pod{cur, p}
		ps.byIP[a] = conflicted
	}
}

func (ps *Pods) release(addr netip.Addr, p *Pod) {
	a := keyOf(addr)
	cur, ok := ps.byIP[a]
	switch {
	case !ok:
	case cur == p:
		delete(ps.byIP, a)
	case cur == conflicted:
		rest := ps.conflicts[a][:0:0]
		for _, q := range ps.conflicts[a] {
			if q != p {
				rest = append(rest, q)
			}
		}
		if len(rest) == 1 {
			ps.byIP[a] = rest[0]
			delete(ps.conflicts, a)
		} else {
			ps.conflicts[a] = rest
		}
	}
}

// labelSet returns the shared set for ns and l, counting one more user;
// ps.mu is held.
func (ps *Pods) labelSet(ns string, l map[string]string) *LabelSet {
	key := labelKey(ns, l)
	if ls, ok := ps.sets[key]; ok {
		ls.refs++
		return ls
	}
	set := make(labels.Set, len(l))
	for k, v := range l {
		set[intern(k)] = intern(v)
	}
	ls := &LabelSet{Namespace: ns, Labels: set, key: key, refs: 1}
	ps.sets[key] = ls
	return ls
}

// labelKey is ns and the labels in a canonical form.
func labelKey(ns string, l map[string]string) string {
	keys := make([]string, 0, len(l))
	n := len(ns)
	for k, v := range l {
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	sort.Strings(keys)
	var b strings.Builder
	b.Grow(n)
	b.WriteString(ns)
	for _, k := range keys {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
	}
	return b.String()
}

func sameLabels(a labels.Set, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if w, ok := a[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// intern returns the canonical copy of s: namespaces, service accounts
// and label keys and values repeat across many pods.
func intern(s string) string { return unique.Make(s).Value() }

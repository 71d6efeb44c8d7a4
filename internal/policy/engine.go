package policy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/ratelimit"
)

// Identity sources (Workload.By; a log field).
const (
	ByToken   = "token"
	ByAddress = "address"
	ByUnknown = "unknown"
)

// Workload is who a client is and the policy that applies to it.
type Workload struct {
	// By says how the client was identified: ByToken, ByAddress or
	// ByUnknown (no pod owns its address: the cluster default applies).
	By             string
	Namespace      string
	ServiceAccount string
	Pod            string
	// Note says why a presented token was not used ("" when it was, or
	// when there was none).
	Note string
	// Rules is the effective policy; nil when no policy applies (the
	// gateway's routes alone decide).
	Rules *Effective
}

// ErrForeignAddress refuses a token presented from the address of another
// pod: a token copied out of its pod.
var ErrForeignAddress = errors.New("service-account token presented from another pod's address")

// Engine holds the cluster's policies and answers who a client is and what
// applies to it. Set, Delete and Replace change the policies (from one
// goroutine at a time); every change is a new snapshot, swapped in
// atomically: a request decided under the old one keeps it. Identify is
// safe for concurrent use and, for a known label set, costs a few map
// lookups.
type Engine struct {
	// Pods is the pod index; required.
	Pods *identity.Pods
	// Tokens verifies service-account tokens; nil ignores them (every
	// client is identified by its address).
	Tokens *identity.Tokens
	// Pools reports whether the gateway has a pool; nil accepts any name.
	Pools func(name string) bool
	// Granted reports whether the EgressPolicies of a namespace may name
	// a pool (the gateway's pools.<name>.namespaces); nil grants every
	// pool. The cluster default may name any pool. After the grants
	// change, call Recheck.
	Granted func(pool, namespace string) bool
	// Intercept offers interception to policies: the Secrets their
	// credentials may name. Nil: the gateway has no interception CA, and
	// a policy that intercepts is invalid (InterceptUnavailable).
	Intercept Interception
	// Limiter enforces workloads' limits; nil means a ratelimit.Local.
	Limiter Limiter
	// Changed, when set, is called with each compiled policy after it was
	// set (to write its status), and with each whose standing under the
	// gateway's limits changed.
	Changed func(c *Compiled)
	// MaxPerNamespace and MaxBytes bound what the gateway holds: the
	// EgressPolicies of one namespace, and the Size of all policies. The
	// oldest are kept (creation time, then namespace and name); the
	// others are refused (LimitExceeded). 0: MaxPoliciesPerNamespace,
	// MaxTotalBytes.
	MaxPerNamespace, MaxBytes int

	once     sync.Once
	mu       sync.Mutex           // writers
	policies map[string]*Compiled // as compiled
	inForce  map[string]*Compiled // after the gateway's limits
	snap     atomic.Pointer[snapshot]
	gen      uint64
}

// snapshot is one immutable generation of the policies, with the
// effective policies computed from it (a cache that fills as clients
// arrive).
type snapshot struct {
	gen     uint64
	byNS    map[string][]*Compiled // namespaced, in precedence order
	def     *Compiled              // the cluster default, or nil
	unknown *Effective             // for clients without a known pod

	mu     sync.Mutex
	effs   map[string]*Effective
	byAddr map[netip.Addr]*Effective // unknownAt
}

func (e *Engine) init() {
	e.once.Do(func() {
		e.policies, e.inForce = map[string]*Compiled{}, map[string]*Compiled{}
		if e.Limiter == nil {
			e.Limiter = limiterFunc((&ratelimit.Local{}).Acquire)
		}
		e.mu.Lock()
		e.rebuild()
		e.mu.Unlock()
	})
}

type limiterFunc func(ctx context.Context, key string, l ratelimit.Limit) (func(), error)

func (f limiterFunc) Acquire(ctx context.Context, key string, l ratelimit.Limit) (func(), error) {
	return f(ctx, key, l)
}

// Set compiles and stores a policy (cluster: a ClusterEgressPolicy),
// replacing the one of the same name, and returns it compiled. A policy
// whose generation is the one already held (its status changed, not its
// spec) changes nothing.
func (e *Engine) Set(p *EgressPolicy, cluster bool) *Compiled {
	e.init()
	c := compile(p, cluster, e.Pools, e.Granted, e.Intercept)
	e.mu.Lock()
	if old := e.policies[c.Key]; old != nil && old.UID == c.UID && old.Generation == c.Generation && c.Generation > 0 {
		c = e.inForce[c.Key]
		e.mu.Unlock()
		return c
	}
	e.policies[c.Key] = c
	changed := e.rebuild()
	c = e.inForce[c.Key]
	e.mu.Unlock()
	e.changed(append(changed, c))
	return c
}

// changed reports cs through Changed, each policy once.
func (e *Engine) changed(cs []*Compiled) {
	if e.Changed == nil {
		return
	}
	seen := map[string]bool{}
	for i := len(cs) - 1; i >= 0; i-- {
		if c := cs[i]; c != nil && !seen[c.Key] {
			seen[c.Key] = true
			e.Changed(c)
		}
	}
}

// Delete removes the policy namespace/name (cluster: the
// ClusterEgressPolicy name).
func (e *Engine) Delete(namespace, name string, cluster bool) {
	e.init()
	key := namespace + "/" + name
	if cluster {
		key = KindClusterEgressPolicy + "/" + name
	}
	e.mu.Lock()
	var changed []*Compiled
	if _, ok := e.policies[key]; ok {
		delete(e.policies, key)
		changed = e.rebuild()
	}
	e.mu.Unlock()
	e.changed(changed) // room freed under the limits
}

// Replace makes the engine hold exactly ps (and cps, the
// ClusterEgressPolicies), in one swap.
func (e *Engine) Replace(ps, cps []*EgressPolicy) []*Compiled {
	e.init()
	out := make([]*Compiled, 0, len(ps)+len(cps))
	for _, p := range ps {
		out = append(out, compile(p, false, e.Pools, e.Granted, e.Intercept))
	}
	for _, p := range cps {
		out = append(out, compile(p, true, e.Pools, e.Granted, e.Intercept))
	}
	e.mu.Lock()
	e.policies = make(map[string]*Compiled, len(out))
	for _, c := range out {
		e.policies[c.Key] = c
	}
	e.rebuild()
	for i, c := range out {
		out[i] = e.inForce[c.Key]
	}
	e.mu.Unlock()
	e.changed(out)
	return out
}

// Recheck compiles every policy again, against the gateway's pools and
// grants as they are now (after a configuration reload), and reports the
// policies whose verdict on themselves changed (valid or not, and why)
// through Changed.
func (e *Engine) Recheck() {
	e.init()
	e.mu.Lock()
	var changed []*Compiled
	for k, old := range e.policies {
		if old.src == nil {
			continue
		}
		c := compile(old.src, old.Cluster, e.Pools, e.Granted, e.Intercept)
		if c.Reason != old.Reason || fmt.Sprint(c.Err) != fmt.Sprint(old.Err) {
			changed = append(changed, c)
		}
		e.policies[k] = c
	}
	changed = append(changed, e.rebuild()...)
	for i, c := range changed {
		changed[i] = e.inForce[c.Key]
	}
	e.mu.Unlock()
	e.changed(changed)
}

// Policies returns the compiled policies, sorted by key.
func (e *Engine) Policies() []*Compiled {
	e.init()
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Compiled, 0, len(e.inForce))
	for _, c := range e.inForce {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// rebuild applies the gateway's limits to e.policies and swaps in a
// snapshot of what is in force; e.mu is held. It returns the policies
// whose standing under the limits changed (refused, or in force again).
func (e *Engine) rebuild() []*Compiled {
	e.gen++
	s := &snapshot{gen: e.gen, byNS: map[string][]*Compiled{}, effs: map[string]*Effective{}}
	old := e.inForce
	e.inForce = e.limit()
	var changed []*Compiled
	for k, c := range e.inForce {
		if o := old[k]; o != nil && o != c && (o.Reason == ReasonLimitExceeded) != (c.Reason == ReasonLimitExceeded) {
			changed = append(changed, c)
		}
	}
	for _, c := range e.inForce {
		switch {
		case !c.Cluster:
			s.byNS[c.Namespace] = append(s.byNS[c.Namespace], c)
		case c.Name == DefaultName:
			s.def = c
		}
	}
	for _, ps := range s.byNS {
		sortPolicies(ps)
	}
	if s.def != nil {
		s.unknown = combine([]*Compiled{s.def}, s.def.Key+" (unknown clients)", e.Limiter)
	}
	e.snap.Store(s)
	return changed
}

// limit returns e.policies with those beyond the gateway's limits
// refused: the cluster default first, then the oldest EgressPolicies.
func (e *Engine) limit() map[string]*Compiled {
	perNS, total := e.MaxPerNamespace, e.MaxBytes
	if perNS <= 0 {
		perNS = MaxPoliciesPerNamespace
	}
	if total <= 0 {
		total = MaxTotalBytes
	}
	all := make([]*Compiled, 0, len(e.policies))
	for _, c := range e.policies {
		all = append(all, c)
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Cluster != b.Cluster {
			return a.Cluster
		}
		if !a.created.Equal(b.created) {
			return a.created.Before(b.created)
		}
		return a.Key < b.Key
	})
	out := make(map[string]*Compiled, len(all))
	count := map[string]int{}
	used := 0
	for _, c := range all {
		if c.Cluster {
			out[c.Key] = c
			used += c.size
			continue
		}
		count[c.Namespace]++
		var why string
		switch {
		case count[c.Namespace] > perNS:
			why = fmt.Sprintf("namespace %s has more than %d EgressPolicies, the gateway's limit (policies per namespace; the oldest are kept)", c.Namespace, perNS)
		case c.Err == nil && used+c.size > total:
			why = fmt.Sprintf("the gateway holds %d bytes of policies and this one's %d would pass its limit of %d (total policy size; the oldest are kept)", used, c.size, total)
		}
		if why == "" {
			if c.Err == nil {
				used += c.size
			}
			out[c.Key] = c
			continue
		}
		r := *c
		r.invalidate(errors.New(why), ReasonLimitExceeded)
		out[c.Key] = &r
	}
	return out
}

// Effective returns what applies to pods with label set ls, computed once
// per snapshot and label set.
func (e *Engine) Effective(ls *identity.LabelSet) *Effective {
	e.init()
	s := e.snap.Load()
	if c := ls.Cached(); c != nil && c.Gen == s.gen {
		eff, _ := c.Value.(*Effective)
		return eff
	}
	eff := s.effective(ls, e.Limiter)
	ls.Cache(&identity.Cached{Gen: s.gen, Value: eff})
	return eff
}

// Unknown returns what applies to a client without a known pod: the
// cluster default, or nil.
func (e *Engine) Unknown() *Effective {
	e.init()
	return e.snap.Load().unknown
}

// maxUnknownClients bounds the per-address copies of the unknown clients'
// Effective a snapshot keeps.
const maxUnknownClients = 4096

// unknownAt is what applies to a client at addr without a known pod: the
// cluster default, whose limits hold per address (a client cannot use up
// the others' slots).
func (e *Engine) unknownAt(addr netip.Addr) *Effective {
	e.init()
	s := e.snap.Load()
	u := s.unknown
	if u == nil || (u.limit.None() && u.ceiling.None()) {
		return u
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if eff, ok := s.byAddr[addr]; ok {
		return eff
	}
	if s.byAddr == nil || len(s.byAddr) >= maxUnknownClients {
		s.byAddr = map[netip.Addr]*Effective{}
	}
	eff := *u
	eff.limitKey = u.limitKey + " " + addr.String()
	s.byAddr[addr] = &eff
	return &eff
}

func (s *snapshot) effective(ls *identity.LabelSet, lim Limiter) *Effective {
	var ps []*Compiled
	var key strings.Builder
	key.WriteString(ls.Namespace)
	for _, c := range s.byNS[ls.Namespace] {
		if c.Selects(ls.Labels) {
			ps = append(ps, c)
			key.WriteByte(0)
			key.WriteString(c.Name)
		}
	}
	if s.def != nil {
		ps = append(ps, s.def)
	}
	if len(ps) == 0 {
		return nil
	}
	k := key.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if eff, ok := s.effs[k]; ok {
		return eff
	}
	eff := combine(ps, KindClusterEgressPolicy+"/"+DefaultName+" in "+ls.Namespace, lim)
	s.effs[k] = eff
	return eff
}

// Identify returns the workload of a client at addr whose request carried
// the Proxy-Authorization value auth ("" when none). A bearer token is
// verified and preferred over the address; a token the API server
// rejects, or one presented from another pod's address, is an error (the
// client is refused). When the token cannot be reviewed now, the address
// decides, and Note says so.
func (e *Engine) Identify(ctx context.Context, addr netip.Addr, auth string) (Workload, error) {
	e.init()
	if tok, ok := bearer(auth); ok && e.Tokens != nil {
		t, err := e.Tokens.Verify(ctx, addr, tok)
		switch {
		case err == nil:
			w, err := e.byToken(t, addr)
			if p := e.Pods.ByName(t.Namespace, t.Pod); e.Pods.Synced() && (p == nil || p.UID != t.PodUID) {
				// The pod is gone (or not indexed yet): the next request
				// is reviewed again, and the API server refuses the token
				// of a deleted pod.
				e.Tokens.Forget(tok)
			}
			return w, err
		case errors.Is(err, identity.ErrRejected):
			return Workload{By: ByToken}, err
		}
		w := e.byAddress(addr)
		w.Note = err.Error()
		return w, nil
	}
	return e.byAddress(addr), nil
}

func (e *Engine) byToken(t identity.Token, addr netip.Addr) (Workload, error) {
	w := Workload{By: ByToken, Namespace: t.Namespace, ServiceAccount: t.ServiceAccount, Pod: t.Pod}
	p := e.Pods.ByName(t.Namespace, t.Pod)
	if p != nil && p.UID != t.PodUID {
		p = nil // another pod of that name: not the token's
	}
	if owner := e.Pods.ByAddr(addr); owner != nil && owner != p && owner.UID != t.PodUID {
		return w, fmt.Errorf("%w: the token of pod %s/%s came from the address of pod %s/%s", ErrForeignAddress, t.Namespace, t.Pod, owner.Namespace, owner.Name)
	}
	if p == nil {
		// Not in the index yet: its labels are unknown.
		w.Rules = e.unknownAt(addr)
		return w, nil
	}
	w.Rules = e.Effective(p.Labels)
	return w, nil
}

func (e *Engine) byAddress(addr netip.Addr) Workload {
	p := e.Pods.ByAddr(addr)
	if p == nil {
		return Workload{By: ByUnknown, Rules: e.unknownAt(addr)}
	}
	return Workload{By: ByAddress, Namespace: p.Namespace, ServiceAccount: p.ServiceAccount, Pod: p.Name, Rules: e.Effective(p.Labels)}
}

// bearer returns the token of a "Bearer <token>" value.
func bearer(auth string) (string, bool) {
	const prefix = "bearer "
	if len(auth) <= len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return "", false
	}
	tok := strings.TrimSpace(auth[len(prefix):])
	return tok, tok != ""
}

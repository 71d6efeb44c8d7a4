package policy

import (
	"context"
	"slices"
	"strings"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/ratelimit"
	"egret.io/egret/internal/route"
)

// Effective is what applies to a client: the policies that select it,
// combined by precedence into route tables. Many clients share one; it is
// immutable and safe for concurrent use.
//
// Precedence: a deny rule of any applicable policy that matches wins
// (those of the more specific policies are tried first, the cluster
// default's last); otherwise the deciding policy — the most specific
// EgressPolicy that selects the pod (most selector requirements, then
// name), else the cluster default — lets the destination through by its
// first matching allow rule, or applies its default. Report-only policies
// change no verdict: the same combination with them enforced says what
// would be denied.
type Effective struct {
	enforced *route.Table
	report   *route.Table // nil when no report-only policy applies
	decider  *Compiled    // of the enforced verdict; nil: none (the gateway's routes decide)
	limitKey string
	limit    ratelimit.Limit
	// ceiling is the cluster default's limits, per namespace, when an
	// EgressPolicy decides: a tenant's policy cannot lift them.
	ceilKey  string
	ceiling  ratelimit.Limit
	sni      SNIMode
	sites    intercept.Sites // InterceptSite
	limiter  Limiter
	policies []*Compiled // applicable, in precedence order
}

// Limiter takes a slot of a workload's limits (package ratelimit).
type Limiter interface {
	Acquire(ctx context.Context, key string, l ratelimit.Limit) (release func(), err error)
}

// combine builds the Effective of the applicable policies ps, most
// specific first and the cluster default (if any) last. limitKey names the
// workload's limits.
func combine(ps []*Compiled, limitKey string, lim Limiter) *Effective {
	e := &Effective{policies: ps, limiter: lim}
	var enforced, all []*Compiled
	for _, p := range ps {
		all = append(all, p)
		if p.Mode == Enforce {
			enforced = append(enforced, p)
		}
		if m := p.sni; m > e.sni {
			e.sni = m
		}
	}
	e.decider = decider(enforced)
	if n := len(ps); n > 0 && ps[n-1].Cluster && ps[n-1].Mode == Enforce {
		e.sites = append(e.sites, ps[n-1].sites...)
	}
	if d := e.decider; d != nil && !d.Cluster {
		e.sites = append(e.sites, d.sites...)
	}
	e.enforced = table(enforced, e.decider)
	if len(enforced) != len(all) {
		e.report = table(all, decider(all))
	}
	if d := e.decider; d != nil {
		e.limit, e.limitKey = d.limit, d.Key
		if d.Cluster {
			e.limitKey = limitKey // the default's limits hold per namespace
		} else if def := ps[len(ps)-1]; def.Cluster && def.Mode == Enforce && !def.limit.None() {
			// The cluster default's limits are a ceiling over the whole
			// namespace, whichever policy decides.
			e.ceiling, e.ceilKey = def.limit, limitKey
		}
	}
	return e
}

// decider is the policy whose allow rules and default decide: the first
// namespaced one (ps is in precedence order), else the cluster default.
func decider(ps []*Compiled) *Compiled {
	if len(ps) == 0 {
		return nil
	}
	return ps[0]
}

// table compiles the deny rules of ps and d's allow rules and default. No
// policy: everything is allowed (the gateway's routes decide).
func table(ps []*Compiled, d *Compiled) *route.Table {
	ts := make([]*route.Table, 0, len(ps)+1)
	for _, p := range ps {
		ts = append(ts, p.denyT)
	}
	def, pool := route.Direct, ""
	if d != nil {
		ts = append(ts, d.allowT)
		def, pool = d.def, d.defPool
	}
	t, err := route.Join(def, pool, ts...)
	if err != nil {
		// Compile checked every rule; should a combination still fail,
		// fail closed.
		t, _ = route.New([]route.Rule{{Match: route.Match{Any: true}, Action: route.Deny, Source: "egret: " + err.Error()}}, route.Deny, "")
	}
	return t
}

// Decide judges dest for the client: Deny (refused by a policy: the
// decision's Source names the policy and rule), Upstream (allowed, through
// the decision's pool), or Direct (allowed; the gateway's routes decide).
// WouldDeny is set when a report-only policy would have denied it.
func (e *Effective) Decide(ctx context.Context, dest route.Dest, res route.Resolver) route.Decision {
	if dest.IsLoopback() {
		// The route tables let loopback through (a sidecar's own host); at
		// the gateway it is the gateway itself, which no policy opens.
		return route.Decision{Action: route.Deny, Reason: route.ReasonLoopback, Rule: route.RuleLoopback, Source: "egret: loopback is the gateway itself"}
	}
	dec := e.enforced.Decide(ctx, dest, res)
	if dec.Reason == route.ReasonDefault && e.decider != nil {
		dec.Source = e.decider.defSource
	}
	if e.report != nil && dec.Action != route.Deny {
		if rd := e.report.Decide(ctx, dest, res); rd.Action == route.Deny {
			if rd.Reason == route.ReasonDefault {
				if d := decider(e.policies); d != nil {
					rd.Source = d.defSource
				}
			}
			dec.WouldDeny = rd.Detail()
		}
	}
	return dec
}

// Admit takes a slot of the workload's limits for one request or tunnel;
// the error is a *limit.Error. release may be nil.
//
// When an EgressPolicy decides, the cluster default's limits hold too, over
// the namespace (the ceiling): the workload's own slot is taken first, so a
// workload over its own limit does not use up its namespace's.
func (e *Effective) Admit(ctx context.Context) (release func(), err error) {
	if e.limiter == nil {
		return nil, nil
	}
	var own func()
	if !e.limit.None() {
		if own, err = e.limiter.Acquire(ctx, e.limitKey, e.limit); err != nil {
			return nil, err
		}
	}
	if e.ceiling.None() {
		return own, nil
	}
	ceil, err := e.limiter.Acquire(ctx, e.ceilKey, e.ceiling)
	if err != nil {
		if own != nil {
			own()
		}
		return nil, err
	}
	if own == nil {
		return ceil, nil
	}
	if ceil == nil {
		return own, nil
	}
	return func() { own(); ceil() }, nil
}

// SNI says whether CONNECT tunnels to port are checked for a ClientHello
// that names another host than the CONNECT target, and whether a mismatch
// is refused (else only logged). Port 443 is checked.
func (e *Effective) SNI(port uint16) (check, enforce bool) {
	if e.sni == SNIOff || port != 443 {
		return false, false
	}
	return true, e.sni == SNIEnforce
}

// Policy returns the deciding policy's key ("" when none): the workload's
// policy in logs and metrics.
func (e *Effective) Policy() string {
	if e == nil || e.decider == nil {
		return ""
	}
	return e.decider.Key
}

// Policies returns the applicable policies' keys in precedence order.
func (e *Effective) Policies() []string {
	out := make([]string, len(e.policies))
	for i, p := range e.policies {
		out[i] = p.Key
	}
	return out
}

// precedence sorts namespaced policies: more selector requirements first,
// then by name.
func precedence(a, b *Compiled) int {
	if a.specificity != b.specificity {
		return b.specificity - a.specificity
	}
	return strings.Compare(a.Name, b.Name)
}

func sortPolicies(ps []*Compiled) { slices.SortStableFunc(ps, precedence) }

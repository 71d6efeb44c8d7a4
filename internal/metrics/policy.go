package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Policy holds the collectors of per-workload egress (the gateway's
// EgressPolicies). Their policy labels go through a Bounded set.
type Policy struct {
	// Decisions counts requests and tunnels judged by a workload's policy,
	// by policy (the deciding one, bounded) and verdict (allow, deny,
	// would_deny, limited).
	Decisions *prometheus.CounterVec
	// Identities counts clients identified, by how: token, address,
	// unknown (no pod owns the address), rejected (a token refused).
	Identities *prometheus.CounterVec
	// TokenReviews counts TokenReviews sent to the API server, by result
	// (ok, rejected, error).
	TokenReviews *prometheus.CounterVec
	// RateLimitCalls counts calls to the shared rate-limit service, by
	// result (ok, over_limit, error).
	RateLimitCalls *prometheus.CounterVec
	// Policies is the number of policies held, by state (accepted,
	// invalid).
	Policies *prometheus.GaugeVec
	// Pods is the number of pods in the gateway's index.
	Pods prometheus.Gauge
	// Labels bounds the policy label values.
	Labels *Bounded
}

func newPolicy() *Policy {
	return &Policy{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_policy_decisions_total",
			Help: "Requests and tunnels judged by a workload's EgressPolicy, by policy (at most 100 distinct, then \"other\") and verdict.",
		}, []string{"policy", "verdict"}),
		Identities: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_identity_lookups_total",
			Help: "Clients identified by the gateway, by how (token, address, unknown, rejected).",
		}, []string{"by"}),
		TokenReviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_identity_token_reviews_total",
			Help: "TokenReviews of clients' service-account tokens sent to the API server, by result.",
		}, []string{"result"}),
		RateLimitCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_ratelimit_service_calls_total",
			Help: "Calls to the shared Envoy rate-limit service, by result (ok, over_limit, error).",
		}, []string{"result"}),
		Policies: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egret_policies",
			Help: "EgressPolicies and ClusterEgressPolicies the gateway holds, by state (accepted, invalid).",
		}, []string{"state"}),
		Pods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egret_identity_pods",
			Help: "Pods in the gateway's address index.",
		}),
		Labels: &Bounded{Max: 100},
	}
}

func (p *Policy) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.Decisions, p.Identities, p.TokenReviews, p.RateLimitCalls, p.Policies, p.Pods}
}

// Bounded keeps a label's values to a bounded set: the first Max distinct
// values are themselves, later ones are "other". It is safe for concurrent
// use.
type Bounded struct {
	Max int

	mu   sync.RWMutex
	seen map[string]struct{}
}

// Other is the value of labels beyond a Bounded set's Max.
const Other = "other"

// Value returns v, or Other when the set is full and v is not in it.
func (b *Bounded) Value(v string) string {
	b.mu.RLock()
	_, ok := b.seen[v]
	b.mu.RUnlock()
	if ok {
		return v
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.Max {
		return Other
	}
	if b.seen == nil {
		b.seen = map[string]struct{}{}
	}
	b.seen[v] = struct{}{}
	return v
}

package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// InterceptSample is the interception engine's counts at scrape time
// (package intercept's Engine.Stats and Issuer.Stats). Only counts: no
// name, site, credential or path reaches a label.
type InterceptSample struct {
	// Handshakes with clients by result: ok, exempt (passed through),
	// or a failure reason (InterceptHandshakeResults).
	Handshakes map[string]uint64
	// OriginHandshakes completed with origins, of which OriginResumed
	// resumed a TLS session.
	OriginHandshakes, OriginResumed uint64
	// Requests by the method/path rules' verdict (InterceptVerdicts).
	Requests map[string]uint64
	// LeavesSigned were issued, LeafCacheHits served from the cache, which
	// holds LeavesCached now.
	LeavesSigned, LeafCacheHits uint64
	LeavesCached                int
}

// The label values of the interception metrics: a fixed set, whatever
// the engine reports (anything else is counted as "other").
var (
	InterceptHandshakeResults = []string{"ok", "exempt", "sni_mismatch", "client_rejected_leaf", "handshake_timeout", "client_closed", "no_leaf", "other"}
	InterceptVerdicts         = []string{"allowed", "denied", "reported", "failed"}
)

type interceptCollector struct {
	handshakes, origin, requests, signed, hits, cached *prometheus.Desc
	fn                                                 atomic.Pointer[func() InterceptSample]
}

func newInterceptCollector() *interceptCollector {
	return &interceptCollector{
		handshakes: prometheus.NewDesc("egret_intercept_handshakes_total",
			"TLS handshakes with clients of intercepted tunnels, by result: ok, exempt (passed through as a tunnel), or why it failed.", []string{"result"}, nil),
		origin: prometheus.NewDesc("egret_intercept_origin_handshakes_total",
			"TLS handshakes egret completed with the origins of intercepted tunnels, by whether a session was resumed.", []string{"resumed"}, nil),
		requests: prometheus.NewDesc("egret_intercept_requests_total",
			"Requests inside intercepted tunnels, by the method/path rules' verdict: allowed, denied (403), reported (a report-mode deny, let through), failed (egret answered with an error).", []string{"verdict"}, nil),
		signed: prometheus.NewDesc("egret_intercept_leaves_signed_total",
			"Leaf certificates egret issued (a key and a signature each).", nil, nil),
		hits: prometheus.NewDesc("egret_intercept_leaf_cache_hits_total",
			"Leaf certificates served from the cache (no signature).", nil, nil),
		cached: prometheus.NewDesc("egret_intercept_leaf_cache_entries",
			"Leaf certificates in the cache.", nil, nil),
	}
}

// SetIntercept installs the function read at scrape time for the
// interception metrics; nil (the default) exports none.
func (m *Metrics) SetIntercept(f func() InterceptSample) {
	if f == nil {
		m.intercept.fn.Store(nil)
		return
	}
	m.intercept.fn.Store(&f)
}

func (c *interceptCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.handshakes, c.origin, c.requests, c.signed, c.hits, c.cached} {
		ch <- d
	}
}

// bounded sums counts by the allowed label values, anything else into
// "other" (or dropped, when there is no "other").
func bounded(counts map[string]uint64, allowed []string) map[string]uint64 {
	out := make(map[string]uint64, len(allowed))
	for _, v := range allowed {
		out[v] = 0
	}
	for k, n := range counts {
		if _, ok := out[k]; ok {
			out[k] += n
		} else if _, ok := out["other"]; ok {
			out["other"] += n
		}
	}
	return out
}

func (c *interceptCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.fn.Load()
	if f == nil {
		return
	}
	s := (*f)()
	hs := bounded(s.Handshakes, InterceptHandshakeResults)
	for _, r := range InterceptHandshakeResults {
		ch <- prometheus.MustNewConstMetric(c.handshakes, prometheus.CounterValue, float64(hs[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(c.origin, prometheus.CounterValue, float64(s.OriginResumed), "true")
	ch <- prometheus.MustNewConstMetric(c.origin, prometheus.CounterValue, float64(s.OriginHandshakes-min(s.OriginResumed, s.OriginHandshakes)), "false")
	rq := bounded(s.Requests, InterceptVerdicts)
	for _, v := range InterceptVerdicts {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(rq[v]), v)
	}
	ch <- prometheus.MustNewConstMetric(c.signed, prometheus.CounterValue, float64(s.LeavesSigned))
	ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(s.LeafCacheHits))
	ch <- prometheus.MustNewConstMetric(c.cached, prometheus.GaugeValue, float64(s.LeavesCached))
}

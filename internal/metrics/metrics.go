package metrics

import (
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"egret.io/egret/internal/version"
)

// Label values for Kind.
const (
	KindHTTP        = "http"
	KindConnect     = "connect"
	KindTransparent = "transparent"
	KindSOCKS       = "socks5"
)

// Metrics holds every collector.
type Metrics struct {
	Registry *prometheus.Registry

	// Requests counts finished requests and tunnels by kind, route action,
	// route reason, pool and status class ("2xx".."5xx", or "error" when
	// the client went away before an answer).
	Requests *prometheus.CounterVec
	// Duration observes the time from request to the end of the response
	// (http) or to the tunnel's establishment (connect).
	Duration *prometheus.HistogramVec
	// TunnelsOpen is the number of tunnels currently relaying, by kind.
	TunnelsOpen *prometheus.GaugeVec
	// Bytes counts payload bytes by kind and direction ("up" = client to
	// destination, "down" = destination to client).
	Bytes *prometheus.CounterVec
	// UpstreamConnect observes how long establishing a connection through
	// an upstream member took (dial + CONNECT answer), by pool.
	UpstreamConnect *prometheus.HistogramVec
	// UpstreamErrors counts failures of upstream members by pool, member
	// (its redacted URL from the configuration) and error type
	// (upstream_auth_required for 407, upstream_refused for 403/5xx, ...).
	UpstreamErrors *prometheus.CounterVec
	// UpstreamResponses counts upstream answers to CONNECT and forwarded
	// requests by pool, member and status code, so 407/403/5xx rates can be
	// alerted on.
	UpstreamResponses *prometheus.CounterVec
	// UpstreamAttempts counts tries through a member (a request that fails
	// over tries several), by pool and member.
	UpstreamAttempts *prometheus.CounterVec
	// UpstreamMemberDown counts the times a member was marked down (passive
	// failure or failed probe), by pool and member.
	UpstreamMemberDown *prometheus.CounterVec
	// UpstreamProbes counts active health probes by pool and result.
	UpstreamProbes *prometheus.CounterVec
	// CredentialFallbacks counts attempts that used the previous credential
	// because the new one got a 407 (a rotation not yet active at the
	// provider), by pool.
	CredentialFallbacks *prometheus.CounterVec
	// BreakerTransitions counts circuit breaker state changes by new state.
	BreakerTransitions *prometheus.CounterVec
	// LimitRejections counts requests and tunnels refused by a limit, by
	// limit (destination_rate, destination_concurrency,
	// client_concurrency, tunnels, breaker).
	LimitRejections *prometheus.CounterVec
	// PolicyDenials counts requests refused by policy, by policy: route (a
	// deny rule), client (not on the client allow-list), destination_ip
	// (the gateway's SSRF guard).
	PolicyDenials *prometheus.CounterVec
	// WouldDeny counts requests a report-only deny rule would have denied.
	WouldDeny prometheus.Counter
	// TunnelsLimit is the configured maximum of open tunnels; it is
	// exported only when a maximum is set.
	TunnelsLimit prometheus.Gauge

	live       *liveCollector
	intercept  *interceptCollector
	collectors []prometheus.Collector
	// Errors counts errors egret answered with, by Proxy-Status error type.
	Errors *prometheus.CounterVec
	// DNSLookups counts name lookups made for routing and dialing by result
	// ("ok", "error").
	DNSLookups *prometheus.CounterVec
	// ConfigReloads counts configuration and credential reloads by what was
	// reloaded and the result ("ok", "error").
	ConfigReloads *prometheus.CounterVec
	// Ready is 1 while the proxy is ready to serve.
	Ready prometheus.Gauge
	// AcceptErrors counts failed accepts by listener kind and reason
	// (too_many_open_files, other); each is followed by a back-off.
	AcceptErrors *prometheus.CounterVec
	// GuardRefusals counts destinations the SSRF guard refused, by address
	// class (loopback, private, link_local, ...).
	GuardRefusals *prometheus.CounterVec
	// AccessLogDropped counts access log lines dropped because the log's
	// output fell behind (its queue was full).
	AccessLogDropped prometheus.Counter
	// Panics counts panics recovered (the one connection or tunnel closed,
	// the process kept), by where: connection, relay, intercept.
	Panics *prometheus.CounterVec
	// Policy is per-workload egress (policy.go).
	Policy *Policy
}

// New creates the catalog on a new registry, with Go and process collectors;
// ver is the version egret_build_info shows (version.Get().Version in egret).
func New(ver string) *Metrics {
	bi := version.Get()
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_proxy_requests_total",
			Help: "Requests and tunnels handled, by kind, route action, route reason, pool and status class.",
		}, []string{"kind", "action", "reason", "pool", "status_class"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "egret_proxy_request_duration_seconds",
			Help:    "Time to answer a request (http) or establish a tunnel (connect).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"kind", "action"}),
		TunnelsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egret_proxy_tunnels_open",
			Help: "Tunnels currently relaying.",
		}, []string{"kind"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_proxy_bytes_total",
			Help: "Payload bytes relayed, by kind and direction (up: client to destination).",
		}, []string{"kind", "direction"}),
		UpstreamConnect: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "egret_upstream_connect_duration_seconds",
			Help:    "Time to establish a connection through an upstream proxy (dial and CONNECT answer).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"pool"}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_upstream_errors_total",
			Help: "Failures of upstream proxy members, by pool, member and error type.",
		}, []string{"pool", "member", "type"}),
		UpstreamResponses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_upstream_responses_total",
			Help: "Answers of upstream proxies to CONNECT and forwarded requests, by pool, member and status code.",
		}, []string{"pool", "member", "code"}),
		UpstreamAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_upstream_attempts_total",
			Help: "Tries through an upstream member (failover makes several per request), by pool and member.",
		}, []string{"pool", "member"}),
		UpstreamMemberDown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_upstream_member_down_total",
			Help: "Times an upstream member was marked down, by pool and member.",
		}, []string{"pool", "member"}),
		UpstreamProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_upstream_probes_total",
			Help: "Active health probes of upstream members, by pool and result.",
		}, []string{"pool", "result"}),
		CredentialFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_credentials_fallbacks_total",
			Help: "Attempts that used the previous upstream credential because the new one was refused (407), by pool.",
		}, []string{"pool"}),
		BreakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_breaker_transitions_total",
			Help: "Per-destination circuit breaker state changes, by new state.",
		}, []string{"to"}),
		LimitRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_limit_rejections_total",
			Help: "Requests and tunnels refused by a limit, by limit.",
		}, []string{"limit"}),
		PolicyDenials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_proxy_policy_denials_total",
			Help: "Requests refused by policy, by policy (route, client, destination_ip).",
		}, []string{"policy"}),
		WouldDeny: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egret_proxy_would_deny_total",
			Help: "Requests a report-only deny rule would have denied.",
		}),
		TunnelsLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egret_proxy_tunnels_limit",
			Help: "The configured maximum of open tunnels (absent when there is none).",
		}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_proxy_errors_total",
			Help: "Errors egret answered with, by RFC 9209 Proxy-Status error type.",
		}, []string{"type"}),
		DNSLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_dns_lookups_total",
			Help: "Name lookups made for routing and dialing, by result.",
		}, []string{"result"}),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_config_reloads_total",
			Help: "Configuration and credential reloads, by what was reloaded and result.",
		}, []string{"what", "result"}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egret_ready",
			Help: "1 while egret is ready to serve.",
		}),
		AcceptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_proxy_accept_errors_total",
			Help: "Failed accepts (each followed by a back-off), by listener kind and reason (too_many_open_files, other).",
		}, []string{"kind", "reason"}),
		GuardRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_proxy_guard_refusals_total",
			Help: "Destinations the SSRF guard refused, by address class.",
		}, []string{"class"}),
		AccessLogDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egret_proxy_access_log_dropped_total",
			Help: "Access log lines dropped because the log's output fell behind (the queue of lines to write was full).",
		}),
		Panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_proxy_panics_total",
			Help: "Panics recovered, by where (connection, relay, intercept): the connection or tunnel was closed, the process kept.",
		}, []string{"where"}),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "egret_build_info",
		Help:        "egret's build: version, commit (revision), build date and Go version; always 1.",
		ConstLabels: prometheus.Labels{"version": ver, "revision": bi.Commit, "build_date": bi.BuildDate, "goversion": runtime.Version()},
	})
	info.Set(1)
	m.live = &liveCollector{
		memberUp: prometheus.NewDesc("egret_upstream_member_up",
			"1 while an upstream member is healthy, 0 while it is down (in back-off), by pool and member.", []string{"pool", "member"}, nil),
		members: prometheus.NewDesc("egret_upstream_members",
			"Upstream members by pool and state (healthy, down).", []string{"pool", "state"}, nil),
		breakers: prometheus.NewDesc("egret_breakers",
			"Per-destination circuit breakers that are not closed, by state (open, half_open).", []string{"state"}, nil),
	}
	m.collectors = []prometheus.Collector{m.Requests, m.Duration, m.TunnelsOpen, m.Bytes, m.UpstreamConnect,
		m.UpstreamErrors, m.UpstreamResponses, m.UpstreamAttempts, m.UpstreamMemberDown, m.UpstreamProbes,
		m.CredentialFallbacks, m.BreakerTransitions, m.LimitRejections, m.PolicyDenials, m.WouldDeny, m.live,
		m.Errors, m.DNSLookups, m.ConfigReloads, m.Ready, m.AcceptErrors, m.GuardRefusals, m.AccessLogDropped, m.Panics, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	m.intercept = newInterceptCollector()
	m.collectors = append(m.collectors, m.intercept)
	m.Policy = newPolicy()
	m.collectors = append(m.collectors, m.Policy.collectors()...)
	r.MustRegister(m.collectors...)
	m.collectors = append(m.collectors, m.TunnelsLimit) // registered by SetTunnelsLimit
	return m
}

// StatusClass returns "2xx".."5xx" for an HTTP status, "error" for 0.
func StatusClass(code int) string {
	switch {
	case code >= 100 && code < 600:
		return statusClasses[code/100]
	case code == 0:
		return "error"
	default:
		return "other"
	}
}

var statusClasses = [...]string{"", "1xx", "2xx", "3xx", "4xx", "5xx"}

// Code returns the decimal status code as a label value.
func Code(code int) string {
	if code >= 100 && code < 600 {
		return strconv.Itoa(code)
	}
	return "other"
}

// MemberSample is one upstream member's health at scrape time.
type MemberSample struct {
	Pool, Member string
	Healthy      bool
}

// Live reads state that is exported at scrape time rather than counted on
// the request path.
type Live struct {
	// Members lists every upstream member with its health.
	Members func() []MemberSample
	// Breakers returns the number of open and half-open breakers.
	Breakers func() (open, halfOpen int)
}

// SetLive installs the functions read at scrape time; it may be called
// again (after a reload).
func (m *Metrics) SetLive(l Live) { m.live.fn.Store(&l) }

// SetTunnelsLimit exports the maximum of open tunnels.
func (m *Metrics) SetTunnelsLimit(n int64) {
	m.TunnelsLimit.Set(float64(n))
	m.Registry.Register(m.TunnelsLimit)
}

type liveCollector struct {
	memberUp, members, breakers *prometheus.Desc
	fn                          atomic.Pointer[Live]
}

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.memberUp
	ch <- c.members
	ch <- c.breakers
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.fn.Load()
	if l == nil {
		return
	}
	if l.Members != nil {
		type counts struct{ up, down int }
		per := map[string]*counts{}
		var pools []string
		for _, s := range l.Members() {
			v := 0.0
			if s.Healthy {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.memberUp, prometheus.GaugeValue, v, s.Pool, s.Member)
			pc := per[s.Pool]
			if pc == nil {
				pc = &counts{}
				per[s.Pool] = pc
				pools = append(pools, s.Pool)
			}
			if s.Healthy {
				pc.up++
			} else {
				pc.down++
			}
		}
		for _, p := range pools {
			ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(per[p].up), p, "healthy")
			ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(per[p].down), p, "down")
		}
	}
	if l.Breakers != nil {
		open, half := l.Breakers()
		ch <- prometheus.MustNewConstMetric(c.breakers, prometheus.GaugeValue, float64(open), "open")
		ch <- prometheus.MustNewConstMetric(c.breakers, prometheus.GaugeValue, float64(half), "half_open")
	}
}

// Names returns the names of every metric in the catalog (egret's own,
// the webhook's and the Go and process collectors').
func (m *Metrics) Names() []string {
	ch := make(chan *prometheus.Desc, 64)
	done := make(chan []string)
	go func() {
		var out []string
		for d := range ch {
			s := d.String()
			if i := strings.Index(s, `fqName: "`); i >= 0 {
				rest := s[i+len(`fqName: "`):]
				out = append(out, rest[:strings.IndexByte(rest, '"')])
			}
		}
		done <- out
	}()
	for _, c := range append(m.collectors, NewWebhook().Collectors()...) {
		c.Describe(ch)
	}
	close(ch)
	return <-done
}

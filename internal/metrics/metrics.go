package metrics

import (
	"runtime"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	// UpstreamResponses counts upstream answers to CONNECT by pool and
	// status code class, so 407/403/5xx rates can be alerted on.
	UpstreamResponses *prometheus.CounterVec
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
}

// New creates the catalog on a new registry, with Go and process collectors.
func New(version string) *Metrics {
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
			Help: "Answers of upstream proxies to CONNECT and forwarded requests, by pool and status code.",
		}, []string{"pool", "code"}),
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
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "egret_build_info",
		Help:        "egret's version and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	info.Set(1)
	r.MustRegister(m.Requests, m.Duration, m.TunnelsOpen, m.Bytes, m.UpstreamConnect,
		m.UpstreamErrors, m.UpstreamResponses, m.Errors, m.DNSLookups, m.ConfigReloads, m.Ready, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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

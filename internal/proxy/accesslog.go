package proxy

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
)

// Access log field names: one JSON line per request or tunnel.
const (
	logKind        = "kind"         // http, connect, transparent, socks5
	logClient      = "client"       // client address
	logMethod      = "method"       // HTTP method (http kind)
	logDest        = "dest"         // host:port
	logOrigDst     = "orig_dst"     // transparent: the original destination ip:port
	logSniffed     = "sniffed"      // transparent: tls, http or unknown
	logSniffedName = "sniffed_name" // transparent: a name shown but not accepted (it does not resolve to orig_dst)
	logURL         = "url"          // scheme://host/path, no query (http kind)
	logAction      = "route"        // direct, upstream, deny
	logReason      = "reason"       // closed set: host, suffix, cidr, resolved_cidr, port, any, default, loopback
	logDetail      = "rule"         // the deciding entry and where it came from
	logPool        = "pool"         // pool name when upstream
	logUpstream    = "upstream"     // member used (redacted URL)
	logStatus      = "status"       // status answered to the client
	logError       = "error"        // Proxy-Status error type
	logErrDetail   = "error_detail"
	logUp          = "bytes_up"    // client → destination
	logDown        = "bytes_down"  // destination → client
	logConnectMS   = "connect_ms"  // time to establish (dial + CONNECT answer)
	logDuration    = "duration_ms" // whole request or tunnel
	logWouldDeny   = "would_deny"  // the report-only deny rule that would have denied it
)

// event accumulates what one request or tunnel did, for its log line and
// metrics.
type event struct {
	kind    string
	client  string
	method  string
	dest    string
	origDst string // transparent only
	sniffed string // transparent only
	// sniffedName is the name a transparent client showed (SNI, Host) that
	// was not accepted: it does not resolve to the original destination.
	sniffedName string
	url         string
	dec         route.Decision
	decided     bool
	member      string
	status      int
	err         *proxystatus.Error
	up, down    int64
	start       time.Time
	connect     time.Duration
	timed       bool // finish observes the request's duration
	// clientAdmitted is set once admitClient ran (a listener may run it
	// before the rest of admit).
	clientAdmitted bool
	// identified is set once the client's workload was looked up
	// (Options.Workloads); wl is what was found.
	identified bool
	wl         Workload
	policyRule string // the workload's policy rule that allowed the destination
	sni        string // the tunnel's TLS server name, when checked
	// intercepted is set for a tunnel the interception engine served
	// (intercept.go): its site, whether its server name was exempt, the
	// requests served and why the client's handshake failed.
	intercepted, exempt bool
	site                string
	requests            int64
	interceptErr        string

	// shortName is the short name a routed destination was expanded
	// from (shortnames.go).
	shortName string
}

// finish counts and logs a request or tunnel. It frees nothing: what the
// request or tunnel held (its lease) is released by its end.
func (s *Server) finish(ev *event) { s.finishWith(ev, nil) }

// meters caches the metric children a client connection used last, so the
// requests of a keep-alive connection skip the label lookups. The zero
// value is empty.
type meters struct {
	key          meterKey
	requests     prometheus.Counter
	duration     prometheus.Observer
	up, down     prometheus.Counter
	kindForBytes string
}

type meterKey struct{ kind, action, reason, pool, class string }

func (s *Server) finishWith(ev *event, mc *meters) {
	now := time.Now()
	dur := now.Sub(ev.start)
	ev.up = atomic.LoadInt64(&ev.up)
	s.insights.record(ev, now)
	action, reason, pool := "none", "none", ""
	if ev.decided {
		action, reason = ev.dec.Action.String(), ev.dec.Reason.String()
		if ev.dec.Action == route.Upstream {
			pool = s.poolName(ev.dec.Pool)
		}
	}
	if m := s.m; m != nil {
		if mc == nil {
			mc = &meters{}
		}
		k := meterKey{ev.kind, action, reason, pool, metrics.StatusClass(ev.status)}
		if mc.requests == nil || mc.key != k {
			mc.key, mc.requests = k, m.Requests.WithLabelValues(k.kind, k.action, k.reason, k.pool, k.class)
			mc.duration = nil
		}
		mc.requests.Inc()
		if ev.up > 0 || ev.down > 0 {
			if mc.up == nil || mc.kindForBytes != ev.kind {
				mc.kindForBytes = ev.kind
				mc.up, mc.down = m.Bytes.WithLabelValues(ev.kind, "up"), m.Bytes.WithLabelValues(ev.kind, "down")
			}
			if ev.up > 0 {
				mc.up.Add(float64(ev.up))
			}
			if ev.down > 0 {
				mc.down.Add(float64(ev.down))
			}
		}
		if ev.timed {
			// A forwarded request's duration ends with its response (a
			// tunnel's is observed once it is established).
			if mc.duration == nil {
				mc.duration = m.Duration.WithLabelValues(ev.kind, action)
			}
			mc.duration.Observe(dur.Seconds())
		}
		if ev.err != nil {
			m.Errors.WithLabelValues(string(ev.err.Type)).Inc()
			if ev.decided && ev.dec.Action == route.Deny && ev.err.Type == proxystatus.HTTPRequestDenied {
				m.PolicyDenials.WithLabelValues("route").Inc()
			}
		}
		if ev.dec.WouldDeny != "" {
			m.WouldDeny.Inc()
		}
	}
	if s.alog != nil {
		// The line is encoded and written off this goroutine: a copy of
		// the event goes to the logger's queue (nothing allocated).
		s.alog.log(logRecord{ev: *ev, now: now, dur: dur, action: action, reason: reason, pool: pool})
	}
}

// writeLine encodes r's access log line and writes it: on the logger's
// goroutine (accessLogger.run).
func writeLine(out io.Writer, r *logRecord) {
	ev := &r.ev
	msg := "request"
	if ev.kind != metrics.KindHTTP {
		msg = "tunnel"
	}
	l := newLine(r.now, msg)
	l.str(logKind, ev.kind)
	l.str(logClient, ev.client)
	logWorkload(l, ev)
	logIntercept(l, ev)
	if ev.method != "" {
		l.str(logMethod, ev.method)
	}
	l.str(logDest, ev.dest)
	if ev.shortName != "" {
		l.str(logShortName, ev.shortName)
	}
	if ev.origDst != "" {
		l.str(logOrigDst, ev.origDst)
		l.str(logSniffed, ev.sniffed)
		if ev.sniffedName != "" {
			l.str(logSniffedName, ev.sniffedName)
		}
	}
	if ev.url != "" {
		l.str(logURL, ev.url)
	}
	l.str(logAction, r.action)
	l.str(logReason, r.reason)
	if ev.decided {
		l.detail(logDetail, &ev.dec)
		if ev.dec.WouldDeny != "" {
			l.str(logWouldDeny, ev.dec.WouldDeny)
		}
	}
	if r.pool != "" {
		l.str(logPool, r.pool)
	}
	if ev.member != "" {
		l.str(logUpstream, ev.member)
	}
	l.int(logStatus, int64(ev.status))
	if ev.err != nil {
		l.str(logError, string(ev.err.Type))
		l.str(logErrDetail, ev.err.Error())
	}
	l.int(logUp, ev.up)
	l.int(logDown, ev.down)
	if ev.connect > 0 {
		l.ms(logConnectMS, ev.connect)
	}
	l.ms(logDuration, r.dur)
	out.Write(l.end())
	l.release()
}

func (s *Server) poolName(name string) string {
	if name == "" {
		if st := s.state.Load(); st != nil {
			return st.DefaultPool
		}
	}
	return name
}

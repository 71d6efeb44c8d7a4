package intercept

import (
	"log/slog"
	"time"

	"egret.io/egret/internal/proxystatus"
)

// Access log field names of an intercepted request (the tunnel's own line
// is the data plane's).
const (
	LogKind        = "kind"         // "intercept"
	LogClient      = "client"       // client address
	LogWorkload    = "workload"     // the client's workload, when known
	LogDest        = "dest"         // host:port of the tunnel
	LogSite        = "site"         // the intercepted site's first host pattern
	LogMethod      = "method"       // request method
	LogPath        = "path"         // request path, percent-encoded as sent, never the query
	LogProto       = "proto"        // HTTP/1.1 or HTTP/2.0, as the client spoke
	LogStatus      = "status"       // status answered to the client (0: none, the client left)
	LogDecision    = "l7"           // allow, deny, would_deny (report mode)
	LogRule        = "l7_rule"      // the deciding rule: "rule N" or "default"
	LogCredentials = "credentials"  // names of the credentials injected (never their values)
	LogError       = "error"        // Proxy-Status error type of an answer egret made itself
	LogErrDetail   = "error_detail" // its details
	LogUp          = "bytes_up"     // request body bytes
	LogDown        = "bytes_down"   // response body bytes
	LogDuration    = "duration_ms"
)

// Event is one request inside an intercepted tunnel, for the access log
// and metrics. It holds no header value and no query string.
type Event struct {
	Client, Workload string
	Host, Port       string
	Site             string
	Method, Path     string
	Proto            string
	Status           int
	// Decision is allow, deny or would_deny; Rule names the deciding rule.
	Decision, Rule string
	// Credentials are the names of the credentials injected.
	Credentials []string
	// Err is the answer egret made itself, if it did.
	Err                *proxystatus.Error
	BytesUp, BytesDown int64
	Duration           time.Duration
}

// Attrs are the event's log fields.
func (ev *Event) Attrs() []slog.Attr {
	a := make([]slog.Attr, 0, 16)
	a = append(a, slog.String(LogKind, "intercept"), slog.String(LogClient, ev.Client))
	if ev.Workload != "" {
		a = append(a, slog.String(LogWorkload, ev.Workload))
	}
	a = append(a, slog.String(LogDest, ev.Host+":"+ev.Port))
	if ev.Site != "" {
		a = append(a, slog.String(LogSite, ev.Site))
	}
	a = append(a, slog.String(LogMethod, ev.Method), slog.String(LogPath, ev.Path), slog.String(LogProto, ev.Proto),
		slog.Int(LogStatus, ev.Status))
	if ev.Decision != "" {
		a = append(a, slog.String(LogDecision, ev.Decision))
	}
	if ev.Rule != "" {
		a = append(a, slog.String(LogRule, ev.Rule))
	}
	if len(ev.Credentials) > 0 {
		a = append(a, slog.Any(LogCredentials, ev.Credentials))
	}
	if ev.Err != nil {
		a = append(a, slog.String(LogError, string(ev.Err.Type)), slog.String(LogErrDetail, ev.Err.Detail))
	}
	a = append(a, slog.Int64(LogUp, ev.BytesUp), slog.Int64(LogDown, ev.BytesDown),
		slog.Float64(LogDuration, float64(ev.Duration.Microseconds())/1000))
	return a
}

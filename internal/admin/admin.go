package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"egret.io/egret/internal/metrics"
)

// Status is what the status page and /status.json show. It is built on
// request by the Status function given to Handler. Nothing in it is secret:
// members appear by their redacted URL.
type Status struct {
	Version     string            `json:"version"`
	Role        string            `json:"role"`
	Started     time.Time         `json:"started"`
	Ready       bool              `json:"ready"`
	NotReady    string            `json:"not_ready,omitempty"`
	Listeners   []string          `json:"listeners"`
	OpenTunnels int               `json:"open_tunnels"`
	Routes      []RouteStatus     `json:"routes"`
	Default     string            `json:"default_route"`
	Pools       []PoolStatus      `json:"pools"`
	Credentials *CredentialStatus `json:"credentials,omitempty"`
	Config      *ConfigStatus     `json:"config,omitempty"`     // live reloads; nil when off
	Protection  []string          `json:"protection,omitempty"` // the hardening and limits in force, one line each
	Breakers    []BreakerStatus   `json:"breakers"`
	Top         []DestTraffic     `json:"top_destinations"`
	Recent      []RecentEvent     `json:"recent"`
	Extra       map[string]any    `json:"extra,omitempty"`
}

// RouteStatus is one routing rule as shown to operators.
type RouteStatus struct {
	Index  int    `json:"index"`
	Match  string `json:"match"`
	Action string `json:"action"`
	Source string `json:"source"`
	Report bool   `json:"report,omitempty"`
}

// PoolStatus is one upstream pool.
type PoolStatus struct {
	Name    string         `json:"name"`
	Policy  string         `json:"policy,omitempty"`
	Probe   string         `json:"probe,omitempty"`
	File    string         `json:"members_file,omitempty"`
	Healthy int            `json:"healthy"`
	Members []MemberStatus `json:"members"`
}

// MemberStatus is one upstream member (its redacted URL only).
type MemberStatus struct {
	Name      string    `json:"name"`
	Healthy   bool      `json:"healthy"`
	Detail    string    `json:"detail,omitempty"`
	Backup    bool      `json:"backup,omitempty"`
	Weight    int       `json:"weight,omitempty"`
	Auth      string    `json:"auth,omitempty"` // "ntlm", "negotiate HTTP/<host>"; "" for basic
	Active    int64     `json:"active"`
	Fails     int       `json:"consecutive_failures"`
	RetryIn   string    `json:"retry_in,omitempty"` // back-off left, or "next request"
	LastError string    `json:"last_error,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	Probe     string    `json:"probe,omitempty"` // "ok", "failed" or "" (never probed)
	Rotating  bool      `json:"credential_rotating,omitempty"`
}

// CredentialStatus describes the credentials directory (never its content).
type CredentialStatus struct {
	Dir        string    `json:"dir"`
	LastReload time.Time `json:"last_reload,omitzero"`
	LastError  string    `json:"last_error,omitempty"`
	Rotating   bool      `json:"rotating"` // a new credential waits for its first success
}

// ConfigStatus describes live reloads of the configuration.
type ConfigStatus struct {
	File       string    `json:"file,omitempty"`
	EnvDir     string    `json:"env_dir,omitempty"` // the settings directory (EGRET_ENV_DIR), watched like the file
	LastReload time.Time `json:"last_reload,omitzero"`
	LastError  string    `json:"last_error,omitempty"` // the last reload failed: the configuration before it stays in force
	// NeedsRestart names settings the last reload changed that take effect
	// at the next restart.
	NeedsRestart []string `json:"needs_restart,omitempty"`
}

// BreakerStatus is a destination whose circuit breaker is not closed or
// has failures.
type BreakerStatus struct {
	Dest      string `json:"dest"`
	State     string `json:"state"`
	Failures  int    `json:"consecutive_failures"`
	RetryIn   string `json:"retry_in,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// DestTraffic is one of the top destinations by bytes.
type DestTraffic struct {
	Dest     string `json:"dest"`
	Bytes    int64  `json:"bytes"`
	Requests int64  `json:"requests"`
	Errors   int64  `json:"errors"`
}

// RecentEvent is a recent denial or error.
type RecentEvent struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Client string    `json:"client"`
	Dest   string    `json:"dest"`
	Status int       `json:"status"`
	Error  string    `json:"error"`
	Detail string    `json:"detail"`
	Denied bool      `json:"denied"`
}

// Options configure the admin handler.
type Options struct {
	Metrics *metrics.Metrics
	// Ready reports readiness and, when not ready, why.
	Ready func() (bool, string)
	// Status builds the status page's content; nil serves no status page.
	Status func() Status
	// PProf serves net/http/pprof under /debug/pprof/.
	PProf bool
	// Token returns the bearer token that opens the status page,
	// status.json and pprof to peers that are not on loopback; "" means
	// there is none, and only loopback peers (kubectl port-forward) see
	// them. nil is the same as "". An error fails closed: only loopback.
	// /healthz, /readyz and /metrics are open to whoever reaches the
	// listener (the kubelet, Prometheus).
	Token func() (string, error)
}

// Handler returns the admin HTTP handler.
func Handler(o Options) http.Handler {
	mux := http.NewServeMux()
	private := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !o.allowed(r) {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.Header().Set("Cache-Control", "no-store")
				w.Header().Set("WWW-Authenticate", `Bearer realm="egret admin"`)
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprintln(w, "egret admin: the status page, status.json and pprof are served to loopback peers (kubectl port-forward) or with \"Authorization: Bearer <token>\" (the token file is EGRET_ADMIN_TOKEN_FILE)")
				return
			}
			h(w, r)
		}
	}
	if o.PProf {
		mux.HandleFunc("/debug/pprof/", private(pprof.Index))
		mux.HandleFunc("/debug/pprof/cmdline", private(pprof.Cmdline))
		mux.HandleFunc("/debug/pprof/profile", private(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", private(pprof.Symbol))
		mux.HandleFunc("/debug/pprof/trace", private(pprof.Trace))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, why := true, ""
		if o.Ready != nil {
			ok, why = o.Ready()
		}
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if o.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	if o.Status != nil {
		mux.HandleFunc("GET /status.json", private(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.Encode(o.Status())
		}))
		mux.HandleFunc("GET /{$}", private(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			// No external asset can load: everything is inline, the one
			// script is allowed by its hash.
			w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src '"+scriptHash+"'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			if err := page.Execute(w, view{Status: o.Status(), Script: template.JS(script)}); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		}))
	}
	return mux
}

// allowed reports whether r may see the status page: its peer is on
// loopback, or it carries the bearer token.
func (o *Options) allowed(r *http.Request) bool {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && ap.Addr().Unmap().IsLoopback() {
		return true
	}
	if o.Token == nil {
		return false
	}
	tok, err := o.Token()
	if err != nil || tok == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(tok)) == 1
}

// TokenFile returns an Options.Token that reads the token from path on
// each use (a mounted Secret that rotates is followed at once). A file
// that does not exist means no token; one that cannot be read, or is
// empty, fails closed.
func TokenFile(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", errors.New("admin token file " + path + " is empty")
		}
		return tok, nil
	}
}

type view struct {
	Status
	Script template.JS
}

// script turns absolute times into ages and refreshes the page every 10 s
// while the tab is visible (the server renders everything; without
// JavaScript the page is complete).
const script = `(function(){
function ago(t){var s=Math.round((Date.now()-Date.parse(t))/1000);if(isNaN(s))return "";if(s<60)return s+"s ago";if(s<3600)return Math.round(s/60)+"m ago";if(s<86400)return Math.round(s/3600)+"h ago";return Math.round(s/86400)+"d ago";}
var els=document.querySelectorAll("time[datetime]");
for(var i=0;i<els.length;i++){els[i].title=els[i].textContent;els[i].textContent=ago(els[i].getAttribute("datetime"));}
document.body.setAttribute("data-rendered","1");
setInterval(function(){if(!document.hidden)location.reload();},10000);
})();`

var scriptHash = func() string {
	h := sha256.Sum256([]byte(script))
	return "sha256-" + base64.StdEncoding.EncodeToString(h[:])
}()

var funcs = template.FuncMap{
	"bytes": func(n int64) string {
		const unit = 1024
		if n < unit {
			return fmt.Sprintf("%d B", n)
		}
		div, exp := int64(unit), 0
		for m := n / unit; m >= unit; m /= unit {
			div *= unit
			exp++
		}
		return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
	},
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
}

var page = template.Must(template.New("status").Funcs(funcs).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>egret {{.Role}} status</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em 2em;color:#222;max-width:80em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f4f4f4}.ok{color:#070}.bad{color:#b00}.warn{color:#a60}code{font-size:13px}.num{text-align:right}
.muted{color:#777}h2{margin-top:1.2em;border-bottom:1px solid #ddd}
</style></head><body>
<h1>egret {{.Role}}</h1>
<p>version <code>{{.Version}}</code>, up since <time datetime="{{rfc3339 .Started}}">{{rfc3339 .Started}}</time> —
{{if .Ready}}<span class="ok" id="ready">ready</span>{{else}}<span class="bad" id="ready">not ready: {{.NotReady}}</span>{{end}},
<span id="tunnels">{{.OpenTunnels}}</span> open tunnels.</p>
<h2>Listeners</h2><ul id="listeners">{{range .Listeners}}<li><code>{{.}}</code></li>{{end}}</ul>

<h2>Upstream pools</h2>
{{range .Pools}}<h3 id="pool-{{.Name}}">{{.Name}} <span class="muted">— {{.Policy}}, {{.Healthy}} of {{len .Members}} healthy{{if .Probe}}, probe {{.Probe}}{{end}}{{if .File}}, members from {{.File}}{{end}}</span></h3>
<table class="pool" data-pool="{{.Name}}"><tr><th>member</th><th>health</th><th>role</th><th>in flight</th><th>failures</th><th>last error</th><th>probe</th></tr>
{{range .Members}}<tr class="member" data-member="{{.Name}}" data-healthy="{{.Healthy}}"><td><code>{{.Name}}</code>{{if .Rotating}} <span class="warn">(new credential not yet confirmed)</span>{{end}}</td>
<td>{{if .Healthy}}<span class="ok">up</span>{{else}}<span class="bad">down</span>{{if .RetryIn}} (retry: {{.RetryIn}}){{end}}{{end}}</td>
<td>{{if .Backup}}backup{{else}}primary{{end}}{{if gt .Weight 1}}, weight {{.Weight}}{{end}}{{if .Auth}}, {{.Auth}}{{end}}</td>
<td class="num">{{.Active}}</td><td class="num">{{.Fails}}</td><td>{{.LastError}}</td><td>{{.Probe}}</td></tr>{{end}}
</table>{{else}}<p id="no-pools">No upstream pool: everything not denied goes direct.</p>{{end}}
{{with .Config}}<p id="config">Configuration{{if .File}} from <code>{{.File}}</code>{{end}}{{if not .LastReload.IsZero}}, last reload <time datetime="{{rfc3339 .LastReload}}">{{rfc3339 .LastReload}}</time>{{end}}{{if .LastError}}, <span class="bad" id="config-error">last reload failed, the configuration before it stays in force: {{.LastError}}</span>{{end}}{{if .NeedsRestart}}, <span class="warn">changed settings that take effect at the next restart: {{range $i, $s := .NeedsRestart}}{{if $i}}, {{end}}{{$s}}{{end}}</span>{{end}}.</p>{{end}}
{{with .Credentials}}<p id="credentials">Credentials from <code>{{.Dir}}</code>{{if not .LastReload.IsZero}}, last reloaded <time datetime="{{rfc3339 .LastReload}}">{{rfc3339 .LastReload}}</time>{{end}}{{if .Rotating}}, <span class="warn">rotation in progress (previous credential kept as fallback)</span>{{end}}{{if .LastError}}, <span class="bad">last reload failed: {{.LastError}}</span>{{end}}.</p>{{end}}

<h2>Circuit breakers</h2>
{{if .Breakers}}<table id="breakers"><tr><th>destination</th><th>state</th><th>failures</th><th>retry in</th><th>last error</th></tr>
{{range .Breakers}}<tr class="breaker" data-state="{{.State}}"><td><code>{{.Dest}}</code></td><td>{{if eq .State "closed"}}<span class="ok">closed</span>{{else}}<span class="bad">{{.State}}</span>{{end}}</td><td class="num">{{.Failures}}</td><td>{{.RetryIn}}</td><td>{{.LastError}}</td></tr>{{end}}
</table>{{else}}<p id="no-breakers" class="muted">No destination is failing.</p>{{end}}
{{if .Protection}}<h2>Protection</h2><ul id="protection">{{range .Protection}}<li>{{.}}</li>{{end}}</ul>{{end}}

<h2>Top destinations</h2>
{{if .Top}}<table id="top"><tr><th>destination</th><th>traffic</th><th>requests</th><th>errors</th></tr>
{{range .Top}}<tr class="dest"><td><code>{{.Dest}}</code></td><td class="num" data-bytes="{{.Bytes}}">{{bytes .Bytes}}</td><td class="num">{{.Requests}}</td><td class="num">{{.Errors}}</td></tr>{{end}}
</table>{{else}}<p id="no-top" class="muted">No traffic yet.</p>{{end}}

<h2>Recent denials and errors</h2>
{{if .Recent}}<table id="recent"><tr><th>when</th><th>kind</th><th>client</th><th>destination</th><th>status</th><th>error</th></tr>
{{range .Recent}}<tr class="{{if .Denied}}denied{{else}}error{{end}}"><td><time datetime="{{rfc3339 .Time}}">{{rfc3339 .Time}}</time></td><td>{{.Kind}}</td><td><code>{{.Client}}</code></td><td><code>{{.Dest}}</code></td><td>{{.Status}}</td><td><code>{{.Error}}</code> <span class="muted">{{.Detail}}</span></td></tr>{{end}}
</table>{{else}}<p id="no-recent" class="muted">Nothing denied or failed lately.</p>{{end}}

<h2>Routes</h2>
<table id="routes"><tr><th>#</th><th>match</th><th>action</th><th>from</th></tr>
{{range .Routes}}<tr><td>{{.Index}}</td><td><code>{{.Match}}</code></td><td>{{.Action}}{{if .Report}} <span class="warn">(report only)</span>{{end}}</td><td>{{.Source}}</td></tr>{{end}}
<tr><td>—</td><td>(anything else)</td><td>{{.Default}}</td><td>default route</td></tr></table>
<p><a href="/metrics">metrics</a> · <a href="/status.json">status.json</a></p>
<script>{{.Script}}</script>
</body></html>
`))

package admin

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"egret.io/egret/internal/metrics"
)

// Status is what the status page and /status.json show. It is built on
// request by the StatusFunc given to Handler.
type Status struct {
	Version     string         `json:"version"`
	Role        string         `json:"role"`
	Started     time.Time      `json:"started"`
	Ready       bool           `json:"ready"`
	NotReady    string         `json:"not_ready,omitempty"`
	Listeners   []string       `json:"listeners"`
	OpenTunnels int            `json:"open_tunnels"`
	Routes      []RouteStatus  `json:"routes"`
	Default     string         `json:"default_route"`
	Pools       []PoolStatus   `json:"pools"`
	Extra       map[string]any `json:"extra,omitempty"`
}

// RouteStatus is one routing rule as shown to operators.
type RouteStatus struct {
	Index  int    `json:"index"`
	Match  string `json:"match"`
	Action string `json:"action"`
	Source string `json:"source"`
}

// PoolStatus is one upstream pool.
type PoolStatus struct {
	Name    string         `json:"name"`
	Members []MemberStatus `json:"members"`
}

// MemberStatus is one upstream member (its redacted URL only).
type MemberStatus struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	Detail  string `json:"detail,omitempty"`
}

// Options configure the admin handler.
type Options struct {
	Metrics *metrics.Metrics
	// Ready reports readiness and, when not ready, why.
	Ready func() (bool, string)
	// Status builds the status page's content; nil serves no status page.
	Status func() Status
}

// Handler returns the admin HTTP handler.
func Handler(o Options) http.Handler {
	mux := http.NewServeMux()
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
		mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.Encode(o.Status())
		})
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
			if err := page.Execute(w, o.Status()); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		})
	}
	return mux
}

var page = template.Must(template.New("status").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>egret status</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
th{background:#f4f4f4}.ok{color:#070}.bad{color:#b00}code{font-size:13px}
</style></head><body>
<h1>egret {{.Role}}</h1>
<p>version <code>{{.Version}}</code>, up since {{.Started.Format "2006-01-02 15:04:05 MST"}} —
{{if .Ready}}<span class="ok" id="ready">ready</span>{{else}}<span class="bad" id="ready">not ready: {{.NotReady}}</span>{{end}},
<span id="tunnels">{{.OpenTunnels}}</span> open tunnels.</p>
<h2>Listeners</h2><ul>{{range .Listeners}}<li><code>{{.}}</code></li>{{end}}</ul>
<h2>Routes</h2>
<table id="routes"><tr><th>#</th><th>match</th><th>action</th><th>from</th></tr>
{{range .Routes}}<tr><td>{{.Index}}</td><td><code>{{.Match}}</code></td><td>{{.Action}}</td><td>{{.Source}}</td></tr>{{end}}
<tr><td>—</td><td>(anything else)</td><td>{{.Default}}</td><td>default route</td></tr></table>
<h2>Upstream pools</h2>
{{range .Pools}}<h3>{{.Name}}</h3><table class="pool"><tr><th>member</th><th>health</th><th>detail</th></tr>
{{range .Members}}<tr><td><code>{{.Name}}</code></td><td>{{if .Healthy}}<span class="ok">up</span>{{else}}<span class="bad">down</span>{{end}}</td><td>{{.Detail}}</td></tr>{{end}}
</table>{{else}}<p>No upstream pool: everything not denied goes direct.</p>{{end}}
<p><a href="/metrics">metrics</a> · <a href="/status.json">status.json</a></p>
</body></html>
`))

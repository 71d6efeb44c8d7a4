package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/metrics"
)

func TestHandler(t *testing.T) {
	ready := false
	h := Handler(Options{Ready: func() (bool, string) { return ready, "starting" }, Status: func() Status {
		return Status{Role: "gateway", Started: time.Now(), Pools: []PoolStatus{{Name: "p<x>", Members: []MemberStatus{{Name: "http://m:1", Healthy: true}}}}}
	}})
	get := func(path string) (*http.Response, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = "127.0.0.1:40000" // kubectl port-forward arrives on loopback
		h.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Result(), string(b)
	}
	if r, _ := get("/readyz"); r.StatusCode != 503 {
		t.Errorf("readyz while starting: %d", r.StatusCode)
	}
	ready = true
	if r, _ := get("/readyz"); r.StatusCode != 200 {
		t.Errorf("readyz: %d", r.StatusCode)
	}
	r, body := get("/")
	csp := r.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "'"+scriptHash+"'") {
		t.Errorf("CSP %q", csp)
	}
	// The script in the page is byte for byte the one the hash allows.
	if !strings.Contains(body, "<script>"+script+"</script>") {
		t.Error("the page's script differs from the hashed one")
	}
	if strings.Contains(body, "p<x>") || !strings.Contains(body, "p&lt;x&gt;") {
		t.Error("names are not escaped")
	}
	if r, body := get("/status.json"); r.StatusCode != 200 || !strings.Contains(body, `"name": "p\u003cx\u003e"`) {
		t.Errorf("status.json: %d %s", r.StatusCode, body)
	}
}

// TestStatusNeedsLoopbackOrToken: the status page, status.json and pprof
// hand client addresses and destinations out, so a peer off loopback
// needs the bearer token; probes and metrics stay open (issue 11).
func TestStatusNeedsLoopbackOrToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	h := Handler(Options{Metrics: metrics.New("test"), PProf: true, Token: TokenFile(file),
		Status: func() Status { return Status{Role: "gateway", Recent: []RecentEvent{{Client: "10.1.2.3:5555"}}} }})
	get := func(path, peer, auth string) int {
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = peer
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	const pod = "10.244.1.7:41000"
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if c := get(p, pod, ""); c != 200 {
			t.Errorf("%s from a pod: %d, want 200 (open to probes and Prometheus)", p, c)
		}
	}
	private := []string{"/", "/status.json", "/debug/pprof/"}
	for _, p := range private {
		if c := get(p, pod, ""); c != 401 {
			t.Errorf("%s from a pod without a token file: %d, want 401", p, c)
		}
		for _, lo := range []string{"127.0.0.1:1", "[::1]:1", "[::ffff:127.0.0.1]:1"} {
			if c := get(p, lo, ""); c != 200 {
				t.Errorf("%s from loopback %s: %d, want 200", p, lo, c)
			}
		}
	}
	if err := os.WriteFile(file, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range private {
		if c := get(p, pod, "Bearer s3cret-token"); c != 200 {
			t.Errorf("%s with the token: %d, want 200", p, c)
		}
		for _, bad := range []string{"", "Bearer wrong", "Basic czNjcmV0LXRva2Vu", "Bearer s3cret-token-and-more", "Bearer"} {
			if c := get(p, pod, bad); c != 401 {
				t.Errorf("%s with %q: %d, want 401", p, bad, c)
			}
		}
	}
	// An empty (or unreadable) token file fails closed.
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if c := get("/status.json", pod, "Bearer "); c != 401 {
		t.Errorf("empty token file: %d, want 401", c)
	}
}

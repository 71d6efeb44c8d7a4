package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	ready := false
	h := Handler(Options{Ready: func() (bool, string) { return ready, "starting" }, Status: func() Status {
		return Status{Role: "gateway", Started: time.Now(), Pools: []PoolStatus{{Name: "p<x>", Members: []MemberStatus{{Name: "http://m:1", Healthy: true}}}}}
	}})
	get := func(path string) (*http.Response, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
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

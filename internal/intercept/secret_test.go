package intercept

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSecretNeverShown drives every path that writes something — allowed,
// denied and reported requests, a credential that fails to reload, an
// origin that fails verification, a misdirected request — and scans all of
// it (the access log as JSON, every answer's header and body, the
// Engine's and Issuer's stats, the reload errors, the credential's own
// printing) for the injected secrets and for the client's own credential.
func TestSecretNeverShown(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	site, vol := apiSite(t, "api.example.test", RulesSpec{Rules: []RuleSpec{
		{Action: "deny", Paths: []string{"/admin/**"}},
		{Action: "allow", PathPrefixes: []string{"/"}},
	}})
	var out bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(&lockedWriter{w: &out, mu: &mu}, nil))
	l.engine.Log = func(ev *Event) { logger.LogAttrs(context.Background(), slog.LevelInfo, "request", ev.Attrs()...) }
	for _, c := range site.Credentials {
		c.Reloaded = func(err error) {
			if err != nil {
				logger.Error("reload", "error", err.Error())
			}
		}
		c.Interval = 50 * time.Millisecond
	}
	ctx, cancel := contextWithCancel()
	done := make(chan struct{})
	go func() { site.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	l.setSites(site)
	u := "https://api.example.test:" + port(l, "api.example.test")
	record := func(resp *http.Response) {
		b, _ := io.ReadAll(resp.Body)
		mu.Lock()
		fmt.Fprintf(&out, "%d %v %s\n", resp.StatusCode, resp.Header, b)
		mu.Unlock()
	}
	hdr := map[string]string{"Authorization": "Bearer " + clientToken, "X-Api-Key": clientToken}
	for _, h2 := range []bool{false, true} {
		c := l.client(h2)
		for _, p := range []string{"/ok", "/admin/users?x=" + clientToken} {
			resp, _ := get(t, c, "GET", u+p, hdr, nil)
			record(resp)
		}
		req, _ := http.NewRequest("GET", u+"/", nil)
		req.Host = "elsewhere.example.test"
		req.Header.Set("Authorization", "Bearer "+clientToken)
		if resp, err := c.Do(req); err == nil {
			record(resp)
			resp.Body.Close()
		}
	}
	// A rotation to a value egret refuses (two lines: header injection).
	vol.Update(t, map[string]string{"token": injectedToken + "\nX-Evil: " + injectedToken, "key": injectedKey})
	time.Sleep(300 * time.Millisecond)
	resp, s := get(t, l.client(true), "GET", u+"/after", hdr, nil)
	record(resp)
	if got := s.Headers["Authorization"]; len(got) != 1 || got[0] != "Bearer "+injectedToken || s.Headers["X-Evil"] != nil {
		t.Errorf("after a refused reload the origin saw %q, X-Evil %q", got, s.Headers["X-Evil"])
	}
	mu.Lock()
	fmt.Fprintf(&out, "%+v %+v %v %v\n", l.engine.Stats(), l.issuer.Stats(), site.Credentials, l.tunnels())
	for _, c := range site.Credentials {
		fmt.Fprintf(&out, "%v %+v %#v %s\n", c, c, *c.val.Load(), *c.val.Load())
	}
	text := out.String()
	mu.Unlock()
	if !strings.Contains(text, `"method":"GET"`) || !strings.Contains(text, "http_request_denied") || !strings.Contains(text, "reload") {
		t.Fatalf("the scan covers too little:\n%s", text)
	}
	for _, secret := range []string{injectedToken, injectedKey, clientToken} {
		if strings.Contains(text, secret) {
			i := strings.Index(text, secret)
			t.Errorf("%q appears in the output: ...%s...", secret, text[max(0, i-200):min(len(text), i+100)])
		}
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

package intercept

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpaqueTargetRefused: a request target in opaque form
// ("https:admin") has no path the rules could judge; it never reaches the
// origin, whose reading of it is its own.
func TestOpaqueTargetRefused(t *testing.T) {
	l := newLab(t)
	var hits atomic.Int32
	var got atomic.Value
	l.origin("api.example.test", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		got.Store(r.RequestURI)
	}))
	site, err := CompileSite(SiteSpec{Hosts: []string{"api.example.test"}, HTTP: RulesSpec{Rules: []RuleSpec{{Action: "deny", PathPrefixes: []string{"/admin"}}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.setSites(site)
	c, _ := l.tunnel(t, "api.example.test")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(l.caCert)
	tc := tls.Client(c, &tls.Config{ServerName: "api.example.test", RootCAs: pool, NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(tc, "GET https:admin HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := httputil.DumpResponse(resp, true)
	if hits.Load() != 0 || resp.StatusCode < 400 {
		t.Errorf("an opaque target reached the origin as %v: %s", got.Load(), b)
	}
}

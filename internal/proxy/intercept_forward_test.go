package proxy

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/proxystatus"
)

// TestInterceptSiteNotForwarded: a request in absolute form (http:// or
// https://, which egret would originate TLS for) to an intercepted site's
// host never reaches the origin past the site's method/path rules and its
// credential: the explicit listener refuses it (403) and names CONNECT, and
// the slots admission took are given back.
func TestInterceptSiteNotForwarded(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	iss := testIssuer(t)
	site, err := intercept.CompileSite(intercept.SiteSpec{Hosts: []string{"api.test"},
		HTTP: intercept.RulesSpec{Rules: []intercept.RuleSpec{{Action: "deny", PathPrefixes: []string{"/admin"}}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clients := &limit.Clients{MaxConcurrent: 4}
	p := startRawWith(t, proxyConf{hosts: map[string]string{"api.test": "127.0.0.1"}}, func(o *Options) {
		o.Intercept = &Interception{Engine: &intercept.Engine{Issuer: iss}, Sites: intercept.Sites{site}}
		o.Protection.Clients = clients
	})
	for _, raw := range []string{
		"GET http://api.test:" + port + "/admin HTTP/1.1\r\nHost: api.test:" + port + "\r\n\r\n",
		"DELETE http://API.test.:" + port + "/admin/x HTTP/1.1\r\nHost: api.test\r\n\r\n",
		"GET https://api.test:" + port + "/admin HTTP/1.1\r\nHost: api.test\r\n\r\n",
	} {
		resp, body := rawRequest(t, p.Addr, raw)
		wantProxyStatus(t, resp, body, http.StatusForbidden, string(proxystatus.HTTPRequestDenied))
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the origin of an intercepted site got %d forwarded requests, past its rules", n)
	}
	waitFor(t, func() bool { return clients.InFlight("127.0.0.1") == 0 })
}

// testIssuer is an interception leaf issuer under a fresh test CA.
func testIssuer(t testing.TB) *intercept.Issuer {
	t.Helper()
	certPEM, keyPEM, err := intercept.GenerateCA("egret test interception CA", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := intercept.ParseAuthority(certPEM, keyPEM, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	iss := &intercept.Issuer{}
	iss.SetAuthority(auth)
	return iss
}

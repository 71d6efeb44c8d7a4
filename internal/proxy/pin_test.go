package proxy

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"egret.io/egret/internal/route"
)

// lineUpstream is a fake upstream proxy that records each request's line
// and Host ("CONNECT 10.9.0.7:443 host=pinned.test:443") and refuses it
// with 403, so nothing is ever dialled.
func lineUpstream(t *testing.T) (addr string, lines chan string) {
	return refusingUpstream(t, func(r *http.Request) string { return r.Method + " " + r.RequestURI + " host=" + r.Host })
}

// TestUpstreamPinnedToApproved: a route that sends a name through a pool
// because its addresses are inside a range asks the member for the
// approved address — the member never resolves the name on its own (its
// answer could differ from the one judged) — on CONNECT and on forwarded
// requests alike: a plain-HTTP request goes through a tunnel to the
// address (in absolute form the member would take the target's authority
// for Host). A name approved by name is asked for by name.
func TestUpstreamPinnedToApproved(t *testing.T) {
	up, lines := lineUpstream(t)
	p := startProxy(t, proxyConf{
		def:     route.Direct,
		members: []string{"http://" + up},
		hosts:   map[string]string{"pinned.test": "10.9.0.7", "named.test": "10.9.0.8", "outside.test": "192.0.2.1"},
		rules: []route.Rule{
			{Match: route.Match{Hosts: []string{"named.test"}}, Action: route.Upstream, Source: "test names"},
			{Match: route.Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}, Action: route.Upstream, Source: "test ranges"},
			{Match: route.Match{Hosts: []string{"outside.test"}}, Action: route.Deny, Source: "test deny"},
		},
	})
	next := func() string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("the upstream got no request")
			return ""
		}
	}
	for _, tc := range []struct {
		name, raw, want string
	}{
		{"connect-by-range", "CONNECT pinned.test:443 HTTP/1.1\r\nHost: pinned.test:443\r\n\r\n", "CONNECT 10.9.0.7:443 host=10.9.0.7:443"},
		{"get-by-range", "GET http://pinned.test/a?b HTTP/1.1\r\nHost: pinned.test\r\n\r\n", "CONNECT 10.9.0.7:80 host=10.9.0.7:80"},
		{"https-get-by-range", "GET https://pinned.test/a HTTP/1.1\r\nHost: pinned.test\r\n\r\n", "CONNECT 10.9.0.7:443 host=10.9.0.7:443"},
		{"connect-by-name", "CONNECT named.test:443 HTTP/1.1\r\nHost: named.test:443\r\n\r\n", "CONNECT named.test:443 host=named.test:443"},
		{"get-by-name", "GET http://named.test/a HTTP/1.1\r\nHost: named.test\r\n\r\n", "GET http://named.test/a host=named.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := rawRequest(t, p.Addr, tc.raw)
			if resp.StatusCode == http.StatusOK {
				t.Fatalf("status %d from a member that refuses everything", resp.StatusCode)
			}
			if got := next(); got != tc.want {
				t.Errorf("the member was asked %q, want %q", got, tc.want)
			}
		})
	}
}

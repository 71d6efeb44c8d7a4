package proxy

import (
	"net/http"
	"sync/atomic"
	"testing"
)

// TestShortNamesLookAlikes: names that look short but some resolvers read
// as loopback addresses (2130706433, 0x7f000001, 127.1) and the
// localhost spellings are never dialled by the gateway on its own reading:
// with short names routed, none reaches the loopback origin — the numeric
// single labels are expanded as the pod's resolver would and found nowhere,
// the others are names resolved as any (never read as addresses), localhost
// is not a short name and stays the gateway's own (refused by the routes
// here, as a loopback name).
func TestShortNamesLookAlikes(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	res := &countingResolver{asked: map[string]int{}, names: map[string]string{}}
	p, _ := shortProxy(t, "shop", true, res)
	for _, h := range []string{"2130706433", "0x7f000001", "127.1", "0177.1", "LOCALHOST.", "localhost", "Localhost"} {
		resp, body := rawRequest(t, p.Addr, "GET http://"+h+":"+port+"/ HTTP/1.1\r\nHost: "+h+"\r\n\r\n")
		if resp.StatusCode == http.StatusOK {
			t.Errorf("%s reached the loopback origin: %q", h, body)
		}
		resp, body = rawRequest(t, p.Addr, "CONNECT "+h+":"+port+" HTTP/1.1\r\nHost: "+h+"\r\n\r\n")
		if resp.StatusCode == http.StatusOK {
			t.Errorf("CONNECT %s was established", h)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback origin got %d requests", n)
	}
	for _, h := range []string{"2130706433", "0x7f000001"} { // single labels: short ("127.1" is a name of two labels, resolved as any)
		if n := res.count(h); n != 0 {
			t.Errorf("%s was resolved at the gateway as it is %d times (the pod's resolver expands it first)", h, n)
		}
	}
}

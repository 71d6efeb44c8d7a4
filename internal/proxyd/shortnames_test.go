package proxyd

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"egret.io/egret/internal/testutil/proxytest"
)

// TestGatewayShortNames: the configuration turns short-name handling on
// for the gateway role only. The gateway's own resolver knows "payments"
// (as its own namespace's Service would be): a gateway still never
// resolves it, by default answering 502 with the fix, and with
// EGRET_SHORT_NAMES=route but no way to know the pod's namespace
// (EGRET_POLICY off) refuses too; a sidecar resolves it as the pod does.
func TestGatewayShortNames(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "payments")
	}))
	hosts := map[string]string{"payments": "127.0.0.1"}
	req := "GET http://payments:" + port + "/ HTTP/1.1\r\nHost: payments:" + port + "\r\n\r\n"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"gateway-refuses", map[string]string{"EGRET_ROLE": "gateway", "EGRET_SSRF_ALLOW_CIDRS": "127.0.0.0/8"}, "payments.NAMESPACE.svc.cluster.local, which this gateway does not route"},
		{"gateway-route-without-identity", map[string]string{"EGRET_ROLE": "gateway", "EGRET_SSRF_ALLOW_CIDRS": "127.0.0.0/8", "EGRET_SHORT_NAMES": "route", "EGRET_CLUSTER_DOMAIN": "corp.example"}, "payments.NAMESPACE.svc.corp.example, but the gateway does not know the calling pod's namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := runEgret(t, tc.env, "", hosts)
			resp, body := proxytest.RawRequest(t, e.Proxy, req)
			wantProxyStatus(t, resp, body, http.StatusBadGateway, "destination_not_found")
			if !strings.Contains(body, tc.want) || !strings.Contains(body, "NO_PROXY") {
				t.Errorf("body %q, want %q and the fix", body, tc.want)
			}
			if !strings.Contains(e.Log.String(), `"msg":"short name refused`) {
				t.Errorf("no log line naming the fix:\n%s", e.Log.String())
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("a gateway sent a short name to the origin %d times", n)
	}
	t.Run("gateway-off-resolves-as-any-name", func(t *testing.T) {
		e := runEgret(t, map[string]string{"EGRET_ROLE": "gateway", "EGRET_SSRF_ALLOW_CIDRS": "127.0.0.0/8", "EGRET_SHORT_NAMES": "off"}, "", hosts)
		resp, body := proxytest.RawRequest(t, e.Proxy, req)
		if resp.StatusCode != 200 || body != "payments" {
			t.Fatalf("EGRET_SHORT_NAMES=off: %d %q", resp.StatusCode, body)
		}
	})
	t.Run("sidecar-resolves", func(t *testing.T) {
		e := runEgret(t, nil, "", hosts)
		resp, body := proxytest.RawRequest(t, e.Proxy, req)
		if resp.StatusCode != 200 || body != "payments" {
			t.Fatalf("sidecar: %d %q", resp.StatusCode, body)
		}
	})
}

package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil/squid"
)

// The password has characters that must be percent-encoded in a URL.
const (
	squidUser = "egret"
	squidPass = "p@ss:w/rd%"
	encPass   = "p%40ss%3Aw%2Frd%25"
)

func TestUpstreamSquid(t *testing.T) {
	var viaSeen atomic.Value
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		viaSeen.Store(r.Header.Get("Via"))
		io.WriteString(w, "from origin")
	}))
	tport := tcpOrigin(t, func(c net.Conn) { io.WriteString(c, "banner\n") })
	sq := squid.Start(t, squid.Options{User: squidUser, Password: squidPass, Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	p := startProxy(t, proxyConf{
		members: []string{fmt.Sprintf("http://%s:%s@%s", squidUser, encPass, sq.Addr)},
		hosts:   map[string]string{"internal.test": "127.0.0.1"},
		rules:   []route.Rule{{Match: route.Match{Hosts: []string{"internal.test"}}, Action: route.Direct, Source: "test"}},
	})

	t.Run("http-through-squid", func(t *testing.T) {
		resp, err := p.client().Get("http://partner.test:" + port + "/api")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "from origin" {
			t.Fatalf("got %d %q", resp.StatusCode, b)
		}
		via, _ := viaSeen.Load().(string)
		if !strings.Contains(via, "egret-test (egret)") || !strings.Contains(via, "squid") {
			t.Errorf("origin saw Via %q, want egret then squid", via)
		}
		sq.WaitLog(t, "GET http://partner.test:"+port+"/api "+squidUser)
	})
	t.Run("connect-through-squid", func(t *testing.T) {
		_, br, resp := connect(t, p.Addr, "partner.test:"+tport, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT status %d", resp.StatusCode)
		}
		line, _ := br.ReadString('\n')
		if line != "banner\n" {
			t.Errorf("tunnel gave %q", line)
		}
		sq.WaitLog(t, "CONNECT partner.test:"+tport+" "+squidUser)
	})
	t.Run("direct-rule-skips-squid", func(t *testing.T) {
		before := len(sq.AccessLog())
		resp, err := p.client().Get("http://internal.test:" + port + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if via, _ := viaSeen.Load().(string); strings.Contains(via, "squid") {
			t.Errorf("a direct request went through squid (Via %q)", via)
		}
		if after := len(sq.AccessLog()); after != before {
			t.Errorf("squid logged %d new requests for a direct destination", after-before)
		}
	})
	if strings.Contains(p.Log.String(), squidPass) || strings.Contains(p.Log.String(), encPass) {
		t.Error("the upstream password reached the log")
	}
}

func TestUpstream407IsA502(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	sq := squid.Start(t, squid.Options{User: squidUser, Password: squidPass, Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	p := startProxy(t, proxyConf{members: []string{fmt.Sprintf("http://%s:wrong-secret@%s", squidUser, sq.Addr)}})
	for _, raw := range []string{
		"GET http://partner.test:" + port + "/ HTTP/1.1\r\nHost: partner.test\r\n\r\n",
		"CONNECT partner.test:" + port + " HTTP/1.1\r\nHost: partner.test\r\n\r\n",
	} {
		t.Run(strings.Fields(raw)[0], func(t *testing.T) {
			// Each request gets a member fresh out of back-off.
			p.State().Pools["default"].ResetHealth()
			resp, body := rawRequest(t, p.Addr, raw)
			wantProxyStatus(t, resp, body, http.StatusBadGateway, "upstream_auth_required")
			ps := resp.Header.Get("Proxy-Status")
			if !strings.Contains(ps, `next-hop="http://`+sq.Addr+`"`) {
				t.Errorf("Proxy-Status %q does not name the upstream", ps)
			}
			// The only member is now down; as a last resort it is tried
			// again, so the client keeps getting the precise reason.
			resp, body = rawRequest(t, p.Addr, raw)
			wantProxyStatus(t, resp, body, http.StatusBadGateway, "upstream_auth_required")
			if strings.Contains(ps+body, "wrong-secret") {
				t.Errorf("the password leaked into the answer: %q %q", ps, body)
			}
			if resp.Header.Get("Proxy-Authenticate") != "" {
				t.Error("the upstream's Proxy-Authenticate was passed to the client")
			}
		})
	}
	if hits.Load() != 0 {
		t.Error("the origin was reached without valid upstream credentials")
	}
	if strings.Contains(p.Log.String(), "wrong-secret") {
		t.Error("the password reached the log")
	}
}

func TestPoolSkipsDeadMember(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	tport := tcpOrigin(t, func(c net.Conn) { io.WriteString(c, "ok") })
	sq := squid.Start(t, squid.Options{Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	p := startProxy(t, proxyConf{members: []string{"http://" + deadAddr, "http://" + sq.Addr}})
	for i := 0; i < 6; i++ {
		resp, err := p.client().Get("http://partner.test:" + port + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
		_, br, cresp := connect(t, p.Addr, "partner.test:"+tport, "")
		if cresp.StatusCode != 200 {
			t.Fatalf("CONNECT %d: %d", i, cresp.StatusCode)
		}
		if b, _ := io.ReadAll(br); string(b) != "ok" {
			t.Fatalf("CONNECT %d tunnel gave %q", i, b)
		}
	}
	// With every member dead the answer is a 502 naming one: never direct.
	sq.Stop()
	resp, body := rawRequest(t, p.Addr, "CONNECT partner.test:"+tport+" HTTP/1.1\r\nHost: x\r\n\r\n")
	wantProxyStatus(t, resp, body, http.StatusBadGateway, "connection_refused")
}

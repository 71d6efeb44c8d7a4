package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/socks5"
)

// listenerClient makes one request to dest ("name:port", whose address is
// addr) through one of egret's listeners and reports whether the origin's
// answer came back.
type listenerClient struct {
	name string // also the access log's kind
	do   func(t *testing.T, l *listeners, dest, addr string) bool
}

// listeners is a proxy with all four listeners.
type listeners struct {
	*rawProxy
	socksAddr, transAddr string
	orig                 atomic.Pointer[netip.AddrPort] // the transparent listener's original destination
}

func startListeners(t *testing.T, pc proxyConf, p Protection) *listeners {
	t.Helper()
	l := &listeners{}
	l.rawProxy = startRawWith(t, pc, func(o *Options) { o.Protection = p })
	l.socksAddr = l.socks(t, socks5.Auth{})
	l.transAddr = l.transparent(t, func(net.Conn) (netip.AddrPort, error) { return *l.orig.Load(), nil })
	return l
}

// readAnswer reads an HTTP answer on br and reports whether it is the
// origin's.
func readAnswer(t *testing.T, br *bufio.Reader) bool {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return false
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode == 200 && string(b) == "hello from the origin"
}

var everyListener = []listenerClient{
	{"http", func(t *testing.T, l *listeners, dest, _ string) bool {
		c := dialRaw(t, l.Addr)
		c.Send("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest, dest)
		return readAnswer(t, c.BR)
	}},
	{"connect", func(t *testing.T, l *listeners, dest, _ string) bool {
		c := dialRaw(t, l.Addr)
		c.Send("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
		resp, err := http.ReadResponse(c.BR, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			return false
		}
		c.Send("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest)
		defer c.C.Close() // the tunnel ends, and is logged
		return readAnswer(t, c.BR)
	}},
	{"socks5", func(t *testing.T, l *listeners, dest, _ string) bool {
		d, err := proxy.SOCKS5("tcp", l.socksAddr, nil, &net.Dialer{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c, err := d.Dial("tcp", dest)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest)
		return readAnswer(t, bufio.NewReader(c))
	}},
	{"transparent", func(t *testing.T, l *listeners, dest, addr string) bool {
		ap := netip.MustParseAddrPort(addr)
		l.orig.Store(&ap)
		c := dialRaw(t, l.transAddr)
		c.Send("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest)
		defer c.C.Close()
		return readAnswer(t, c.BR)
	}},
}

// lastLine waits for the first access log line of kind written after off
// bytes of the log.
func (l *listeners) lastLine(t *testing.T, off int, kind string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, s := range strings.Split(l.Log.String()[off:], "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(s), &m) == nil && m["kind"] == kind && (m["msg"] == "request" || m["msg"] == "tunnel") {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s access log line in:\n%s", kind, l.Log.String()[off:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSameVerdictOnEveryListener runs each policy against the explicit
// HTTP listener (a forwarded GET), CONNECT, the transparent listener and
// the SOCKS5 listener: each must let the same traffic through and refuse
// the same traffic with the same error (issue 11: one admission path).
func TestSameVerdictOnEveryListener(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the origin")
	}))
	hostsMap := map[string]string{
		"partner.test": "127.0.0.1", "denied.test": "127.0.0.1", "report.test": "127.0.0.1",
		"internal.test": "127.0.0.3", "pooled.test": "127.0.0.1",
	}
	dead := deadAddr(t)
	at := func(ip string) string { return net.JoinHostPort(ip, port) }
	for _, tc := range []struct {
		name    string
		pc      proxyConf
		prot    func() Protection
		hold    bool // hold one tunnel open from the same client first
		idle    bool // hold one idle connection open from the same client first
		dest    string
		addr    string
		wantErr string // "" = through
		want    map[string]string
	}{
		{name: "allowed", dest: "partner.test", addr: at("127.0.0.1")},
		{name: "client-allow-list", prot: func() Protection { return Protection{ClientCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}} },
			dest: "partner.test", addr: at("127.0.0.1"), wantErr: "http_request_denied"},
		{name: "client-limit", prot: func() Protection { return Protection{Clients: &limit.Clients{MaxConcurrent: 1}} }, hold: true,
			dest: "partner.test", addr: at("127.0.0.1"), wantErr: "connection_limit_reached"},
		{name: "client-connection-limit", prot: func() Protection {
			return Protection{ClientConns: &limit.Clients{MaxConcurrent: 1, Kind: limit.KindClientConns}}
		}, idle: true, dest: "partner.test", addr: at("127.0.0.1"), wantErr: "connection_limit_reached"},
		{name: "deny-rule", pc: proxyConf{rules: []route.Rule{{Match: route.Match{Hosts: []string{"denied.test"}}, Action: route.Deny, Source: "test deny"}}},
			dest: "denied.test", addr: at("127.0.0.1"), wantErr: "http_request_denied", want: map[string]string{"route": "deny"}},
		{name: "report-only-rule", pc: proxyConf{rules: []route.Rule{{Match: route.Match{Hosts: []string{"report.test"}}, Action: route.Deny, Report: true, Source: "test report"}}},
			dest: "report.test", addr: at("127.0.0.1"), want: map[string]string{"route": "direct", "would_deny": "host report.test (test report)"}},
		{name: "ssrf-guard", prot: func() Protection {
			return Protection{Guard: &resolve.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}
		}, dest: "internal.test", addr: at("127.0.0.3"), wantErr: "destination_ip_prohibited"},
		{name: "dead-pool", pc: proxyConf{def: route.Direct, members: []string{"http://" + dead},
			rules: []route.Rule{{Match: route.Match{Hosts: []string{"pooled.test"}}, Action: route.Upstream, Source: "test pool"}}},
			dest: "pooled.test", addr: at("127.0.0.1"), wantErr: "connection_refused", want: map[string]string{"route": "upstream"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pc.hosts = hostsMap
			var prot Protection
			if tc.prot != nil {
				prot = tc.prot()
			}
			l := startListeners(t, tc.pc, prot)
			if tc.hold {
				c := dialRaw(t, l.Addr)
				c.Send("CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", at("127.0.0.1"))
				if resp, err := http.ReadResponse(c.BR, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
					t.Fatalf("the tunnel to hold: %v %v", resp, err)
				}
			}
			if tc.idle {
				dialRaw(t, l.Addr)
				waitFor(t, func() bool { return prot.ClientConns.InFlight("127.0.0.1") == 1 })
			}
			for _, lc := range everyListener {
				t.Run(lc.name, func(t *testing.T) {
					off := len(l.Log.String())
					got := lc.do(t, l, net.JoinHostPort(tc.dest, port), tc.addr)
					if got != (tc.wantErr == "") {
						t.Errorf("through = %v, want %v", got, tc.wantErr == "")
					}
					kind := lc.name
					if tc.idle && kind == "connect" {
						kind = "http" // refused as it connected, before its request
					}
					line := l.lastLine(t, off, kind)
					want := map[string]string{"error": tc.wantErr}
					for k, v := range tc.want {
						want[k] = v
					}
					wantFields(t, line, want)
				})
			}
		})
	}
}

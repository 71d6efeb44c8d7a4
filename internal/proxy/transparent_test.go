package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/origdst"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/sniff"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/squid"
)

// TestTransparentSquid routes redirected connections (their original
// destination given by a hook; TestTransparentRealOriginalDst and
// test/e2e use the kernel's) from real curl through a real Squid with Basic
// auth: TLS by its SNI name, HTTP by its Host name, an IP Host and unknown
// protocols by the original address.
func TestTransparentSquid(t *testing.T) {
	cert, caFile := testutil.SelfSigned(t, "", "partner.test", "internal.test", "local.test", "blocked.test")
	tport := tlsOrigin(t, cert)
	_, hport := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "http origin host=%s via=%s", r.Host, r.Header.Get("Via"))
	}))
	bport := tcpOrigin(t, func(c net.Conn) { io.WriteString(c, "220 banner from a server-first protocol\r\n") })
	sq := squid.Start(t, squid.Options{User: squidUser, Password: squidPass, Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	p := startRaw(t, proxyConf{
		members: []string{fmt.Sprintf("http://%s:%s@%s", squidUser, encPass, sq.Addr)},
		// internal.test resolves to 127.0.0.2, where nothing listens: a
		// direct connection only works if it goes to the original address,
		// and the name, which does not stand for it, is not used.
		hosts: map[string]string{"internal.test": "127.0.0.2", "local.test": "127.0.0.1", "blocked.test": "127.0.0.1"},
		rules: []route.Rule{
			{Match: route.Match{Hosts: []string{"internal.test", "local.test"}}, Action: route.Direct, Source: "test direct"},
			{Match: route.Match{Hosts: []string{"blocked.test"}}, Action: route.Deny, Source: "test deny"},
		},
	})

	tests := []struct {
		name     string
		orig     string   // original destination the listener recovers
		curl     []string // curl arguments; %s is the transparent listener
		wantOut  string   // substring of curl's output ("" = curl must fail)
		dest     string   // access log dest
		fields   map[string]string
		squidLog string // substring of a Squid access log line; "" = Squid must not see it
	}{
		{
			name:    "tls-routes-by-sni-through-squid",
			orig:    "127.0.0.1:" + tport,
			curl:    []string{"--cacert", caFile, "--connect-to", "partner.test:" + tport + ":%s", "https://partner.test:" + tport + "/"},
			wantOut: "tls origin sni=partner.test host=partner.test:" + tport,
			dest:    "partner.test:" + tport,
			fields: map[string]string{"sniffed": "tls", "orig_dst": "127.0.0.1:" + tport, "route": "upstream", "reason": "default",
				"pool": "default", "status": "200", "upstream": "http://" + sq.Addr},
			squidLog: "CONNECT partner.test:" + tport + " " + squidUser,
		},
		{
			name:     "http-routes-by-host-through-squid",
			orig:     "127.0.0.1:" + hport,
			curl:     []string{"--connect-to", "partner.test:" + hport + ":%s", "http://partner.test:" + hport + "/page"},
			wantOut:  "http origin host=partner.test:" + hport + " via=",
			dest:     "partner.test:" + hport,
			fields:   map[string]string{"sniffed": "http", "route": "upstream", "status": "200"},
			squidLog: "CONNECT partner.test:" + hport + " " + squidUser,
		},
		{
			name:    "http-ip-host-routes-by-original-address",
			orig:    "127.0.0.1:" + hport,
			curl:    []string{"--connect-to", "127.0.0.1:" + hport + ":%s", "http://127.0.0.1:" + hport + "/"},
			wantOut: "http origin host=127.0.0.1:" + hport,
			dest:    "127.0.0.1:" + hport,
			fields:  map[string]string{"sniffed": "http", "route": "direct", "reason": "loopback"},
		},
		{
			name:    "direct-name-dials-the-original-address",
			orig:    "127.0.0.1:" + tport,
			curl:    []string{"--cacert", caFile, "--connect-to", "local.test:" + tport + ":%s", "https://local.test:" + tport + "/"},
			wantOut: "tls origin sni=local.test",
			dest:    "local.test:" + tport,
			fields:  map[string]string{"sniffed": "tls", "route": "direct", "reason": "host", "rule": "host local.test (test direct)", "sniffed_name": ""},
		},
		{
			name:    "direct-name-not-resolving-to-the-original-routes-by-address",
			orig:    "127.0.0.1:" + tport,
			curl:    []string{"--cacert", caFile, "--connect-to", "internal.test:" + tport + ":%s", "https://internal.test:" + tport + "/"},
			wantOut: "tls origin sni=internal.test",
			dest:    "127.0.0.1:" + tport,
			fields:  map[string]string{"sniffed": "tls", "route": "direct", "reason": "loopback", "sniffed_name": "internal.test"},
		},
		{
			name:   "denied-tls-is-closed",
			orig:   "127.0.0.1:" + tport,
			curl:   []string{"--cacert", caFile, "--connect-to", "blocked.test:" + tport + ":%s", "https://blocked.test:" + tport + "/"},
			dest:   "blocked.test:" + tport,
			fields: map[string]string{"sniffed": "tls", "route": "deny", "status": "403", "error": "http_request_denied"},
		},
		{
			name:    "denied-http-gets-proxy-status",
			orig:    "127.0.0.1:" + hport,
			curl:    []string{"-i", "--connect-to", "blocked.test:" + hport + ":%s", "http://blocked.test:" + hport + "/"},
			wantOut: "Proxy-Status: egret; error=http_request_denied",
			dest:    "blocked.test:" + hport,
			fields:  map[string]string{"sniffed": "http", "route": "deny", "status": "403"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := p.transparent(t, fixed(tc.orig))
			args := append([]string(nil), tc.curl...)
			for i, a := range args {
				if strings.Contains(a, "%s") {
					args[i] = fmt.Sprintf(a, addr)
				}
			}
			before := len(sq.AccessLog())
			out, stderr, code := runCurl(t, args...)
			switch {
			case tc.wantOut == "" && code == 0:
				t.Fatalf("curl succeeded, want a failure: %q", out)
			case tc.wantOut != "" && (code != 0 || !strings.Contains(out, tc.wantOut)):
				t.Fatalf("curl exit %d: %q (stderr %q), want %q", code, out, stderr, tc.wantOut)
			}
			line := p.logLine(t, metrics.KindTransparent, tc.dest)
			wantFields(t, line, tc.fields)
			if tc.squidLog != "" {
				sq.WaitLog(t, tc.squidLog)
			} else if after := sq.AccessLog(); len(after) != before {
				t.Errorf("squid saw a connection that must not go upstream: %v", after[before:])
			}
		})
	}

	t.Run("unknown-protocol-routes-by-original-address", func(t *testing.T) {
		addr := p.transparent(t, fixed("127.0.0.1:"+bport))
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		b := make([]byte, 64)
		n, err := c.Read(b)
		if err != nil || !strings.HasPrefix(string(b[:n]), "220 banner") {
			t.Fatalf("read %q, %v: want the server's banner", b[:n], err)
		}
		// The client speaks second: the proxy waits only the first-byte
		// timeout before it tunnels by address.
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("banner took %v", d)
		}
		c.Close()
		wantFields(t, p.logLine(t, metrics.KindTransparent, "127.0.0.1:"+bport),
			map[string]string{"sniffed": "unknown", "route": "direct", "status": "200"})
	})
	if got := counterValue(t, p.Metrics, "egret_proxy_requests_total", map[string]string{"kind": metrics.KindTransparent, "action": "upstream", "status_class": "2xx"}); got < 2 {
		t.Errorf("egret_proxy_requests_total{kind=transparent,action=upstream} = %v, want >= 2", got)
	}
	if strings.Contains(p.Log.String(), squidPass) || strings.Contains(p.Log.String(), encPass) {
		t.Error("the upstream password reached the log")
	}
}

// TestTransparentLyingName covers clients whose sniffed name and original
// address disagree: nothing is ever dialled off loopback here (the test
// dialer records and refuses such dials; the upstream only records).
func TestTransparentLyingName(t *testing.T) {
	up, targets := recordingUpstream(t)
	p := startRaw(t, proxyConf{
		members: []string{"http://" + up},
		hosts:   map[string]string{"internal.test": "127.0.0.2", "app.corp.test": "198.51.100.9"},
		rules: []route.Rule{
			{Match: route.Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}, Action: route.Deny, Source: "test deny"},
			{Match: route.Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.64/26")}}, Action: route.Direct, Source: "test direct cidr"},
			{Match: route.Match{Hosts: []string{"internal.test"}}, Action: route.Direct, Source: "test direct host"},
			{Match: route.Match{Suffixes: []route.Suffix{{Domain: "corp.test"}}}, Action: route.Direct, Source: "test direct suffix"},
		},
	})
	tests := []struct {
		name       string
		orig, host string
		dest       string
		fields     map[string]string
		connect    string // the CONNECT the upstream must receive ("" = none)
		dialled    string // the direct dial that must be attempted ("" = none)
	}{
		{
			name: "address-deny-wins-over-name", orig: "203.0.113.7:443", host: "partner.test",
			dest: "203.0.113.7:443", fields: map[string]string{"route": "deny", "reason": "cidr", "error": "http_request_denied"},
		},
		{
			name: "direct-name-not-resolving-to-address-routes-by-address", orig: "198.51.100.20:8443", host: "internal.test",
			dest: "198.51.100.20:8443", fields: map[string]string{"route": "upstream", "reason": "default", "error": "upstream_refused"},
			connect: "CONNECT 198.51.100.20:8443",
		},
		{
			// Both say direct, but the name does not stand for the address:
			// the connection is judged (and logged) by the address it dials.
			name: "direct-name-and-address-but-name-elsewhere-routes-by-address", orig: "198.51.100.70:8443", host: "internal.test",
			dest: "198.51.100.70:8443", fields: map[string]string{"route": "direct", "reason": "cidr", "sniffed_name": "internal.test", "error": "connection_refused"},
			dialled: "198.51.100.70:8443",
		},
		{
			name: "direct-name-resolving-to-address-goes-direct", orig: "198.51.100.9:8443", host: "app.corp.test",
			dest: "app.corp.test:8443", fields: map[string]string{"route": "direct", "reason": "suffix", "error": "connection_refused"},
			dialled: "198.51.100.9:8443",
		},
		{
			name: "upstream-name-is-sent-to-the-upstream", orig: "198.51.100.20:443", host: "partner.test",
			dest: "partner.test:443", fields: map[string]string{"route": "upstream", "error": "upstream_refused"},
			connect: "CONNECT partner.test:443",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := p.transparent(t, fixed(tc.orig))
			before := len(p.notDialled())
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", tc.host)
			resp, err := io.ReadAll(c)
			c.Close()
			if err != nil || !strings.HasPrefix(string(resp), "HTTP/1.1 ") || !strings.Contains(string(resp), "Proxy-Status: egret; error="+tc.fields["error"]) {
				t.Errorf("client got %q, %v: want an error response", resp, err)
			}
			wantFields(t, p.logLine(t, metrics.KindTransparent, tc.dest), tc.fields)
			select {
			case got := <-targets:
				if tc.connect == "" || !strings.HasPrefix(got, tc.connect+" ") && got != tc.connect {
					t.Errorf("upstream received %q, want %q", got, tc.connect)
				}
			case <-time.After(200 * time.Millisecond):
				if tc.connect != "" {
					t.Errorf("upstream received nothing, want %q", tc.connect)
				}
			}
			dialled := p.notDialled()[before:]
			if tc.dialled == "" && len(dialled) > 0 || tc.dialled != "" && (len(dialled) == 0 || dialled[len(dialled)-1] != tc.dialled) {
				t.Errorf("direct dials %v, want %q", dialled, tc.dialled)
			}
		})
	}
}

// TestTransparentLoopGuard refuses connections whose original destination
// is egret itself.
func TestTransparentLoopGuard(t *testing.T) {
	p := startRaw(t, proxyConf{})
	self := p.transparent(t, fixed("127.0.0.1:1")) // a listener to aim at
	_, selfPort, _ := net.SplitHostPort(self)
	tests := []struct {
		name string
		orig func(net.Conn) (netip.AddrPort, error)
		want string // dest logged
	}{
		{"own-transparent-listener", fixed(self), self},
		{"own-http-listener", fixed(p.Addr), p.Addr},
		{"transparent-port-on-a-local-address", fixed("127.0.0.9:" + selfPort), "127.0.0.9:" + selfPort},
		{"not-tracked-means-not-redirected", func(c net.Conn) (netip.AddrPort, error) {
			return netip.AddrPort{}, fmt.Errorf("%w (test)", origdst.ErrNotTracked)
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := p.transparent(t, tc.orig)
			want := tc.want
			if want == "" {
				want = addr
			}
			wantPlainClose(t, addr, "GET / HTTP/1.1\r\nHost: example.test\r\n\r\n")
			wantFields(t, p.logLine(t, metrics.KindTransparent, want),
				map[string]string{"error": "proxy_loop_detected", "status": "508", "route": "none"})
		})
	}
	if !strings.Contains(p.Log.String(), "loop guard") {
		t.Error("the loop guard did not log a warning")
	}
}

// TestTransparentRealOriginalDst connects to a transparent listener with
// the real SO_ORIGINAL_DST lookup and no NAT rule: the connection was not
// redirected, so it is refused.
func TestTransparentRealOriginalDst(t *testing.T) {
	p := startRaw(t, proxyConf{})
	addr := p.transparent(t, nil)
	wantPlainClose(t, addr, "hello")
	wantFields(t, p.logLine(t, metrics.KindTransparent, addr), map[string]string{"error": "proxy_loop_detected"})
}

// TestTransparentClientLeaves logs a client that closes before sending
// anything as gone (status 0), without dialling.
func TestTransparentClientLeaves(t *testing.T) {
	p := startRaw(t, proxyConf{})
	addr := p.transparent(t, fixed("198.51.100.1:80"))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	wantFields(t, p.logLine(t, metrics.KindTransparent, "198.51.100.1:80"),
		map[string]string{"status": "0", "error": "connection_terminated", "sniffed": "unknown"})
	if d := p.notDialled(); len(d) != 0 {
		t.Errorf("dialled %v for a client that left", d)
	}
}

// TestTransparentShutdown stops accepting on Shutdown, waits for an open
// tunnel, and cuts it at the deadline.
func TestTransparentShutdown(t *testing.T) {
	bport := tcpOrigin(t, func(c net.Conn) {
		io.WriteString(c, "hello\n")
		io.Copy(io.Discard, c)
	})
	p := startRaw(t, proxyConf{})
	addr := p.transparent(t, fixed("127.0.0.1:"+bport))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if b := make([]byte, 6); func() bool { _, err := io.ReadFull(c, b); return err != nil }() {
		t.Fatal("no banner through the tunnel")
	}
	waitFor(t, func() bool { return p.OpenTunnels() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want the deadline (a tunnel was open)", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("Shutdown returned after %v without waiting for the tunnel", d)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the tunnel is still open after the drain deadline")
	}
	if c2, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c2.Close()
		t.Error("the transparent listener still accepts after Shutdown")
	}
}

func TestRouteTransparentPorts(t *testing.T) {
	// The port always comes from the original destination, never from the
	// Host header.
	p := startRaw(t, proxyConf{hosts: map[string]string{"a.test": "127.0.0.1"}})
	a := &admission{st: p.State()}
	a.names.s = p.Server
	p.routeTransparent(context.Background(), &event{}, a, netip.MustParseAddrPort("127.0.0.1:8080"),
		sniff.Result{Proto: sniff.HTTP, Host: "a.test", Port: 9999})
	dest, dial, dec := a.dest, a.dial, a.dec
	if dest.String() != "a.test:8080" || dial.Addr.String() != "127.0.0.1" || dial.Port != 8080 || dec.Action != route.Direct {
		t.Errorf("dest %s dial %s/%s action %s", dest, dial, dial.Addr, dec.Action)
	}
}

// BenchmarkTunnelSetup compares a connection's setup cost through the
// transparent listener (original destination, sniffing the Host, two
// route decisions) with a CONNECT tunnel, both direct to a loopback origin
// answering one request.
func BenchmarkTunnelSetup(b *testing.B) {
	port := tcpOriginB(b)
	for _, kind := range []string{"transparent", "connect"} {
		b.Run(kind, func(b *testing.B) {
			p, addr := startRawB(b)
			if kind == "transparent" {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				defer ln.Close()
				go p.ServeTransparent(ln, TransparentOptions{OriginalDst: fixed("127.0.0.1:" + port)})
				addr = ln.Addr().String()
			}
			req := "GET / HTTP/1.1\r\nHost: origin.test:" + port + "\r\nConnection: close\r\n\r\n"
			if kind == "connect" {
				req = "CONNECT 127.0.0.1:" + port + " HTTP/1.1\r\nHost: x\r\n\r\n" + req
			}
			buf := make([]byte, 4096)
			b.ReportAllocs()
			b.ResetTimer()
			defer cpuPerOp(b)()
			for i := 0; i < b.N; i++ {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				io.WriteString(c, req)
				var got []byte
				for {
					n, err := c.Read(buf)
					got = append(got, buf[:n]...)
					if err != nil {
						break
					}
				}
				c.Close()
				if !strings.Contains(string(got), "pong") {
					b.Fatalf("got %q", got)
				}
			}
		})
	}
}

func tcpOriginB(b testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				var got []byte
				for !strings.Contains(string(got), "\r\n\r\n") {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					got = append(got, buf[:n]...)
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\npong")
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func startRawB(b *testing.B) (*Server, string) { return startBenchServer(b, Options{}) }

package policy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	xproxy "golang.org/x/net/proxy"

	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/proxyd"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/upstream"
)

// The gateway of these tests: a proxy.Server whose Workloads is a policy
// engine (as proxyd wires it), with all four listeners on loopback. Clients
// take the addresses of the test's pods: 127.0.0.0/8 is the host's, so a
// socket can be bound to any of them.

// hosts resolves the test's names.
type hosts map[string]string

func (h hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type gateway struct {
	s                        *proxy.Server
	http, socks, transparent string
	orig                     atomic.Pointer[netip.AddrPort]
	log                      *testutil.SyncBuffer
	eng                      *policy.Engine
}

// startGateway serves eng's policies on four listeners. pools are the
// gateway's upstream pools (name → member URL).
func startGateway(t *testing.T, eng *policy.Engine, names hosts, pools map[string]string) *gateway {
	t.Helper()
	tbl, err := route.New(nil, route.Direct, "")
	if err != nil {
		t.Fatal(err)
	}
	return startGatewayRoutes(t, eng, names, pools, tbl)
}

// startGatewayRoutes is startGateway with the gateway's own routes tbl.
func startGatewayRoutes(t *testing.T, eng *policy.Engine, names hosts, pools map[string]string, tbl *route.Table) *gateway {
	t.Helper()
	g := &gateway{log: &testutil.SyncBuffer{}, eng: eng}
	st := &proxy.State{Routes: tbl, Pools: map[string]*upstream.Pool{}, DefaultPool: "default"}
	for name, u := range pools {
		spec, err := upstream.ParseMemberURL(u)
		if err != nil {
			t.Fatal(err)
		}
		st.Pools[name] = &upstream.Pool{Name: name, Members: []*upstream.Member{upstream.NewMember(spec)}}
	}
	s, err := proxy.New(proxy.Options{Via: "gw-test", Resolver: names, AccessLog: g.log, Workloads: proxyd.Workloads(eng)}, st)
	if err != nil {
		t.Fatal(err)
	}
	g.s = s
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	hl, sl, tl := listen(), listen(), listen()
	g.http, g.socks, g.transparent = hl.Addr().String(), sl.Addr().String(), tl.Addr().String()
	go s.Serve(hl)
	go s.ServeSOCKS(sl, proxy.SOCKSOptions{})
	go s.ServeTransparent(tl, proxy.TransparentOptions{OriginalDst: func(net.Conn) (netip.AddrPort, error) { return *g.orig.Load(), nil }})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return g
}

// origin serves "hello from <name>" on loopback and returns its port.
func origin(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		fmt.Fprintf(w, "hello from %s", host)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// dialFrom connects to addr from the local address src.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.Dial("tcp", addr)
}

// listenerKinds are the four listeners, by their access log kind.
var listenerKinds = []string{"http", "connect", "socks5", "transparent"}

// request asks for http://dest/ (dest is "name:port", served at
// 127.0.0.1:port) through the gateway's listener kind, from the client
// address src, with the Proxy-Authorization value auth ("" for none; the
// HTTP listener's kinds only). It returns the origin's body, or "" and
// the refusal's status.
func (g *gateway) request(t *testing.T, kind, src, dest, auth string) (body string, status int) {
	t.Helper()
	authLine := ""
	if auth != "" {
		authLine = "Proxy-Authorization: " + auth + "\r\n"
	}
	read := func(br *bufio.Reader, method string) (string, int) {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return "", 0
		}
		if method == "CONNECT" && resp.StatusCode == 200 {
			return "", 200 // the tunnel: no body
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return "", resp.StatusCode
		}
		return string(b), 200
	}
	switch kind {
	case "http":
		c, err := dialFrom(src, g.http)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", dest, dest, authLine)
		return read(bufio.NewReader(c), "GET")
	case "connect":
		c, err := dialFrom(src, g.http)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", dest, dest, authLine)
		if _, st := read(br, "CONNECT"); st != 200 {
			return "", st
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest)
		return read(br, "GET")
	case "socks5":
		d, err := xproxy.SOCKS5("tcp", g.socks, nil, &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := d.Dial("tcp", dest)
		if err != nil {
			return "", 403
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest)
		return read(bufio.NewReader(c), "GET")
	case "transparent":
		_, port, _ := net.SplitHostPort(dest)
		p, _ := strconv.Atoi(port)
		ap := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p))
		g.orig.Store(&ap)
		c, err := dialFrom(src, g.transparent)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest)
		return read(bufio.NewReader(c), "GET")
	}
	t.Fatalf("no listener %s", kind)
	return "", 0
}

// line waits for the access log line of kind with dest written after off
// bytes of the log.
func (g *gateway) line(t *testing.T, off int, kind, dest string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, s := range strings.Split(g.log.String()[off:], "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(s), &m) == nil && m["kind"] == kind && (dest == "" || strings.HasPrefix(fmt.Sprint(m["dest"]), strings.Split(dest, ":")[0])) {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s access log line for %s in:\n%s", kind, dest, g.log.String()[off:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantFields checks fields of a log line ("" means absent).
func wantFields(t *testing.T, line map[string]any, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, ok := line[k]
		switch {
		case v == "" && ok:
			t.Errorf("log field %s = %v, want none", k, got)
		case v != "" && fmt.Sprint(got) != v:
			t.Errorf("log field %s = %v, want %q", k, got, v)
		}
	}
}

// eventually retries cond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(25 * time.Millisecond)
	}
	return time.Since(start)
}

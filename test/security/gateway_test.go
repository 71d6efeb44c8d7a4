package security

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	xproxy "golang.org/x/net/proxy"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/proxyd"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/dnstest"
)

// The addresses of the tests: two origins — one a policy or a route
// forbids, one it allows — at "public" addresses (TEST-NET-3, never routed)
// that the gateway's dialer reaches on loopback, where they listen: a
// policy judges a loopback literal as the gateway itself, so the tests'
// destinations must not be loopback to the gateway. The clients ("pods")
// are on loopback addresses of their own.
const (
	forbiddenIP = "203.0.113.2"
	allowedIP   = "203.0.113.3"
)

// onLoopback is where the test reaches a TEST-NET-3 address:
// 203.0.113.N listens on 127.91.0.N.
func onLoopback(a netip.Addr) netip.Addr {
	if b := a.As4(); a.Is4() && b[0] == 203 && b[1] == 0 && b[2] == 113 {
		return netip.AddrFrom4([4]byte{127, 91, 0, b[3]})
	}
	return a
}

// listenAt listens on the loopback address standing for ip ("" port: a
// free one).
func listenAt(ip, port string) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort(onLoopback(netip.MustParseAddr(ip)).String(), port))
}

// listeners are the gateway's four listeners, by their access log kind.
var listeners = []string{"http", "connect", "socks5", "transparent"}

// gateway is a proxy.Server with a policy engine on four loopback
// listeners, resolving through a real DNS server.
type gateway struct {
	s                        *proxy.Server
	http, socks, transparent string
	log                      *testutil.SyncBuffer
	eng                      *policy.Engine
	pods                     *identity.Pods
	dns                      *dnstest.Server
	orig                     sync.Map // client address → netip.AddrPort, the transparent listener's original destination
	nextPod                  atomic.Int32
	dialMu                   sync.Mutex
	dialled                  []string // every address the gateway dialled directly
}

// startGateway serves the gateway with the route rules rules (default
// direct), resolving names with answer (TTL 0: every lookup reaches the
// server); opts change the proxy's options.
func startGateway(t *testing.T, rules []route.Rule, answer dnstest.Answer, opts ...func(*proxy.Options)) *gateway {
	t.Helper()
	g := &gateway{log: &testutil.SyncBuffer{}, pods: identity.NewPods()}
	g.eng = &policy.Engine{Pods: g.pods}
	g.dns = dnstest.Start(t, 0, answer)
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("options ndots:1 attempts:1 timeout:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := resolve.New(resolve.Config{Servers: []string{g.dns.Addr}, ResolvConf: conf, SystemHosts: "-",
		MinTTL: time.Nanosecond, TTL: time.Nanosecond, NegativeTTL: time.Nanosecond, StaleTTL: -1}, nil)
	tbl, err := route.New(rules, route.Direct, "")
	if err != nil {
		t.Fatal(err)
	}
	st := &proxy.State{Routes: tbl}
	o := proxy.Options{Via: "sec-test", Resolver: res, AccessLog: g.log, Workloads: proxyd.Workloads(g.eng),
		DialContext: g.dial, Timeouts: proxy.Timeouts{Dial: 3 * time.Second}}
	for _, f := range opts {
		f(&o)
	}
	s, err := proxy.New(o, st)
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
	go s.ServeTransparent(tl, proxy.TransparentOptions{OriginalDst: func(c net.Conn) (netip.AddrPort, error) {
		src, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		if v, ok := g.orig.Load(src); ok {
			return v.(netip.AddrPort), nil
		}
		return netip.AddrPort{}, fmt.Errorf("the test set no original destination for %s", src)
	}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.log.String())
		}
	})
	return g
}

// dial is the gateway's dialer: an IPv6 address that carries an IPv4
// address reaches that IPv4 address, as an IPv6-only cluster's NAT64
// translator (64:ff9b::/96, 64:ff9b:1::/96) or a 6to4 relay would; a
// TEST-NET-3 address reaches its loopback stand-in (onLoopback); loopback
// is dialled; nothing else leaves: refused.
func (g *gateway) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.dialMu.Lock()
	g.dialled = append(g.dialled, addr)
	g.dialMu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b: // NAT64, well-known or local-use /96
			a = netip.AddrFrom4([4]byte(b[12:]))
		case b[0] == 0x20 && b[1] == 0x02: // 6to4
			a = netip.AddrFrom4([4]byte(b[2:6]))
		case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // Teredo (its server)
			a = netip.AddrFrom4([4]byte(b[4:8]))
		case binary.BigEndian.Uint64(b[:8]) == 0 && binary.BigEndian.Uint32(b[8:12]) == 0: // IPv4-compatible
			a = netip.AddrFrom4([4]byte(b[12:]))
		}
	}
	if a = onLoopback(a); !a.IsLoopback() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, netip.AddrPortFrom(a, ap.Port()).String())
}

// pod registers a new client address in namespace ns and returns it.
func (g *gateway) pod(ns string) string {
	n := g.nextPod.Add(1)
	ip := fmt.Sprintf("127.92.%d.%d", n/250, n%250+1)
	g.pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-" + strconv.Itoa(int(n)), UID: types.UID("uid-" + ip)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}})
	return ip
}

// policy sets the EgressPolicy of namespace ns from its spec (YAML).
func (g *gateway) policy(t *testing.T, ns, spec string) {
	t.Helper()
	var p policy.EgressPolicy
	doc := "metadata: {name: p, namespace: " + ns + "}\nspec:\n" + spec
	if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
		t.Fatalf("%v in\n%s", err, doc)
	}
	if c := g.eng.Set(&p, false); c.Err != nil {
		t.Fatal(c.Err)
	}
}

// origin is a plain TCP server on ip:port that counts the connections it
// accepts and the bytes it receives, and answers each HTTP request with
// "hello from <name>", keeping the connection alive unless the request
// asks to close it.
type origin struct {
	name  string
	conns atomic.Int32
	bytes atomic.Int64
}

func (o *origin) reached() bool { return o.conns.Load() > 0 || o.bytes.Load() > 0 }

// origins starts the forbidden and the allowed origin on one port of their
// own addresses (port "" picks a free one) and returns them and the port.
func origins(t *testing.T, port string) (forbidden, allowed *origin, p string) {
	t.Helper()
	forbidden, allowed = &origin{name: "forbidden"}, &origin{name: "allowed"}
	for try := 0; ; try++ {
		lf, err := listenAt(forbiddenIP, port)
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ = net.SplitHostPort(lf.Addr().String())
		la, err := listenAt(allowedIP, p)
		if err != nil {
			lf.Close()
			if port != "" || try == 20 {
				t.Fatal(err)
			}
			continue
		}
		serveOrigin(t, lf, forbidden)
		serveOrigin(t, la, allowed)
		return forbidden, allowed, p
	}
}

func serveOrigin(t *testing.T, ln net.Listener, o *origin) {
	testutil.Serve(t, ln, func(c net.Conn) {
		o.conns.Add(1)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(&countReader{r: c, n: &o.bytes})
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				io.Copy(io.Discard, br) // TLS, or nothing: count what comes
				return
			}
			req.Body.Close()
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\nhello from %s", len("hello from "+o.name), o.name)
			if req.Close {
				return
			}
		}
	})
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// dialFrom connects to addr from the local address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(15 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// open opens a connection towards dest ("host:port") through the listener
// kind from src, in the listener's own protocol: for "http" a connection
// to the explicit listener (nothing sent), for "connect" a CONNECT tunnel,
// for "socks5" a SOCKS5 CONNECT (a name as a name), for "transparent" a
// connection whose original destination is orig. It returns the
// connection and its reader, or nil and the refusal's status (SOCKS5: 403
// for any failure reply).
func (g *gateway) open(t *testing.T, kind, src, dest string, orig netip.AddrPort) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	switch kind {
	case "http":
		c := dialFrom(t, src, g.http)
		return c, bufio.NewReader(c), 0
	case "connect":
		c := dialFrom(t, src, g.http)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return nil, nil, 0
		}
		if resp.StatusCode != 200 {
			return nil, nil, resp.StatusCode
		}
		return c, br, 200
	case "socks5":
		d, err := xproxy.SOCKS5("tcp", g.socks, nil, &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := d.Dial("tcp", dest)
		if err != nil {
			return nil, nil, 403
		}
		c.SetDeadline(time.Now().Add(15 * time.Second))
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c), 200
	case "transparent":
		g.orig.Store(src, orig)
		c := dialFrom(t, src, g.transparent)
		return c, bufio.NewReader(c), 0
	}
	t.Fatalf("no listener %s", kind)
	return nil, nil, 0
}

// get asks for http://dest/ through the listener kind from src (the
// transparent listener's original destination is orig, and the request's
// Host is host) and returns the origin's body, or "" and the refusal's
// status.
func (g *gateway) get(t *testing.T, kind, src, dest, host string, orig netip.AddrPort) (string, int) {
	t.Helper()
	c, br, st := g.open(t, kind, src, dest, orig)
	if c == nil {
		return "", st
	}
	defer c.Close() // a tunnel's log line is written when it ends
	if kind == "http" {
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest, host)
	} else {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", 0 // closed without an answer (a refused transparent TLS/unknown connection)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", resp.StatusCode
	}
	return string(b), 200
}

// line waits for the access log line of the listener kind from client src.
func (g *gateway) line(t *testing.T, kind, src string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, s := range strings.Split(g.log.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(s), &m) == nil && m["kind"] == kind && strings.HasPrefix(fmt.Sprint(m["client"]), src+":") {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s access log line from %s in:\n%s", kind, src, g.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantFields checks fields of a log line ("" means absent; "*" present).
func wantFields(t *testing.T, line map[string]any, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, ok := line[k]
		switch {
		case v == "" && ok:
			t.Errorf("log field %s = %v, want none", k, got)
		case v == "*" && !ok:
			t.Errorf("log field %s missing in %v", k, line)
		case v != "" && v != "*" && !strings.Contains(fmt.Sprint(got), v):
			t.Errorf("log field %s = %v, want %q in it", k, got, v)
		}
	}
}

func addrPort(ip, port string) netip.AddrPort {
	return netip.MustParseAddrPort(net.JoinHostPort(ip, port))
}

// clientHello returns the ClientHello records Go's TLS client sends for
// server name sni and ALPN protocols alpn.
func clientHello(t *testing.T, sni string, alpn []string) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	go tls.Client(c1, &tls.Config{ServerName: sni, NextProtos: alpn, InsecureSkipVerify: true}).Handshake()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	want := -1 // the handshake message's length, once known
	for want < 0 || len(out) < want {
		hdr := make([]byte, 5)
		if _, err := io.ReadFull(c2, hdr); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
		if _, err := io.ReadFull(c2, body); err != nil {
			t.Fatal(err)
		}
		if want < 0 {
			want = 0
			if len(body) >= 4 {
				want = 4 + (int(body[1])<<16 | int(body[2])<<8 | int(body[3]))
			}
		}
		out = append(out, hdr...)
		out = append(out, body...)
		want += 5 // each record adds its header
	}
	return out
}

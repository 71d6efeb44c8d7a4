package proxy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/socks5"
)

// slowResolver answers "slow.test" only when the lookup's context ends
// (with its error), and loopback for the other names.
type slowResolver struct{ asked chan struct{} }

func (r slowResolver) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	if host == "slow.test" {
		select {
		case r.asked <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// TestLeaseReleasedOnAborts: the slots admission takes come back to zero
// when a tunnel ends any other way than a clean relay — a SOCKS5 CONNECT
// refused by the routes, a client that leaves while its CONNECT is still
// being admitted, and an intercepted tunnel whose client leaves before its
// handshake.
func TestLeaseReleasedOnAborts(t *testing.T) {
	tport := tcpOrigin(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	iss := testIssuer(t)
	site, err := intercept.CompileSite(intercept.SiteSpec{Hosts: []string{"api.test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clients := &limit.Clients{MaxConcurrent: 4}
	conns := &limit.Clients{MaxConcurrent: 4, Kind: limit.KindClientConns}
	tunnels := &limit.Counter{Max: 4}
	res := slowResolver{asked: make(chan struct{}, 1)}
	p := startRawWith(t, proxyConf{rules: []route.Rule{{Action: route.Deny, Match: route.Match{Hosts: []string{"denied.test"}}, Source: "test"}}}, func(o *Options) {
		o.Resolver = res
		o.Intercept = &Interception{Engine: &intercept.Engine{Issuer: iss}, Sites: intercept.Sites{site}}
		o.Protection.Clients, o.Protection.ClientConns, o.Protection.Tunnels = clients, conns, tunnels
	})
	free := func(what string) {
		t.Helper()
		waitFor(t, func() bool {
			return p.OpenTunnels() == 0 && clients.InFlight("127.0.0.1") == 0 && conns.InFlight("127.0.0.1") == 0 && tunnels.Load() == 0
		})
		if c, n, tu := clients.InFlight("127.0.0.1"), conns.InFlight("127.0.0.1"), tunnels.Load(); c != 0 || n != 0 || tu != 0 {
			t.Fatalf("after %s: in flight %d, connections %d, tunnels %d", what, c, n, tu)
		}
	}
	port, _ := strconv.Atoi(tport)
	saddr := p.socks(t, socks5.Auth{})
	for i := 0; i < 2; i++ {
		if code, _ := socksConnect(t, saddr, "denied.test", uint16(port)); code == socks5.Succeeded {
			t.Fatal("a denied SOCKS5 CONNECT succeeded")
		}
		free("a refused SOCKS5 CONNECT")

		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "CONNECT slow.test:443 HTTP/1.1\r\nHost: slow.test:443\r\n\r\n")
		<-res.asked
		c.Close()
		free("a client gone while its CONNECT was admitted")

		tc, _, resp := connect(t, p.Addr, "api.test:"+tport, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT to the site: %d", resp.StatusCode)
		}
		tc.Close()
		free("an intercepted tunnel its client left before the handshake")
	}
}

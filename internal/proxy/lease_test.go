package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/socks5"
)

// TestLeaseOnce: a lease releases each thing it holds exactly once, however
// often it is ended, and one that handed its holdings over releases
// nothing of them.
func TestLeaseOnce(t *testing.T) {
	var n [3]int
	var a, b lease
	a.hold(func() { n[0]++ })
	a.hold(nil)
	a.hold(func() { n[1]++ })
	b.hold(func() { n[2]++ })
	b.take(&a)
	a.end()
	if n != [3]int{} {
		t.Fatalf("the lease that handed over released %v", n)
	}
	b.end()
	b.end()
	a.end()
	if n != [3]int{1, 1, 1} {
		t.Fatalf("released %v, want each once", n)
	}
}

// failingLog is an access log whose every write fails.
type failingLog struct{}

func (failingLog) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestLeaseReleasedWithoutLog: the slots a request or tunnel holds — the
// client's in-flight slot, the tunnel slot, the client's connection slot —
// are given back by the end of the request or tunnel, on every listener,
// whether the access log is off or failing: logging frees nothing.
func TestLeaseReleasedWithoutLog(t *testing.T) {
	tport := tcpOrigin(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	_, hport := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	for _, tc := range []struct {
		name string
		log  io.Writer
	}{{"log-off", nil}, {"log-failing", failingLog{}}} {
		t.Run(tc.name, func(t *testing.T) {
			clients := &limit.Clients{MaxConcurrent: 1}
			conns := &limit.Clients{MaxConcurrent: 2, Kind: limit.KindClientConns}
			tunnels := &limit.Counter{Max: 1}
			p := startRawWith(t, proxyConf{hosts: map[string]string{"t.test": "127.0.0.1"}, rules: []route.Rule{{Action: route.Deny, Match: route.Match{Hosts: []string{"denied.test"}}, Source: "test"}}}, func(o *Options) {
				o.AccessLog = tc.log
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
			for i := 0; i < 2; i++ { // the second round finds every slot free again
				c, _, resp := connect(t, p.Addr, "t.test:"+tport, "")
				if resp.StatusCode != 200 {
					t.Fatalf("CONNECT %d: %d", i, resp.StatusCode)
				}
				c.Close()
				free("a CONNECT tunnel")

				// Requests on one keep-alive connection: each gives its
				// in-flight slot back when its answer is over, while the
				// connection (and its connection slot) stays.
				rc := dialRaw(t, p.Addr)
				for j := 0; j < 3; j++ {
					rc.Send("GET http://t.test:%s/ HTTP/1.1\r\nHost: t.test\r\n\r\n", hport)
					if r, _ := rc.Read("GET"); r.StatusCode != 200 {
						t.Fatalf("GET %d.%d: %d", i, j, r.StatusCode)
					}
					waitFor(t, func() bool { return clients.InFlight("127.0.0.1") == 0 })
				}
				rc.Send("CONNECT denied.test:443 HTTP/1.1\r\nHost: x\r\n\r\n")
				if r, _ := rc.Read("CONNECT"); r.StatusCode != http.StatusForbidden {
					t.Fatalf("denied CONNECT %d: %d", i, r.StatusCode)
				}
				waitFor(t, func() bool { return clients.InFlight("127.0.0.1") == 0 })
				if n := conns.InFlight("127.0.0.1"); n != 1 {
					t.Fatalf("the open keep-alive connection holds %d connection slots, want 1", n)
				}
				rc.C.Close()
				free("forwarded GETs and a refused CONNECT")

				saddr := p.socks(t, socks5.Auth{})
				port, _ := strconv.Atoi(tport)
				code, sc := socksConnect(t, saddr, "t.test", uint16(port))
				if code != socks5.Succeeded {
					t.Fatalf("SOCKS5 %d: reply %d", i, code)
				}
				sc.Close()
				free("a SOCKS5 tunnel")
			}
		})
	}
}

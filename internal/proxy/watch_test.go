package proxy

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/route"
)

// hangingPeer accepts connections, never answers, and reports on closed
// when egret closes one.
func hangingPeer(t *testing.T) (addr string, closed chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	closed = make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
				closed <- struct{}{}
			}()
		}
	}()
	return ln.Addr().String(), closed
}

// TestClientGoneCancelsTheWait: a client that leaves while egret waits on
// its behalf — for a member's CONNECT answer, or an origin's response
// header — ends the wait at once, on every listener: the far side's
// connection is closed long before any timeout (issue 11).
func TestClientGoneCancelsTheWait(t *testing.T) {
	member, memberClosed := hangingPeer(t)
	originAddr, originClosed := hangingPeer(t)
	_, oport, _ := net.SplitHostPort(originAddr)
	l := startListeners(t, proxyConf{
		def: route.Direct, members: []string{"http://" + member},
		hosts:    map[string]string{"pooled.test": "127.0.0.1", "slow.test": "127.0.0.1"},
		rules:    []route.Rule{{Match: route.Match{Hosts: []string{"pooled.test"}}, Action: route.Upstream, Source: "test pool"}},
		timeouts: Timeouts{UpstreamConnect: 30 * time.Second, ResponseHeader: 30 * time.Second},
	}, Protection{})
	wantClosed := func(t *testing.T, ch chan struct{}, what string) {
		t.Helper()
		defer func() { // nothing of this subtest is left for the next
			for len(ch) > 0 {
				<-ch
			}
		}()
		select {
		case <-ch:
		case <-time.After(3 * time.Second):
			t.Fatalf("%s still waited after its client left", what)
		}
	}
	leave := func(c net.Conn) {
		time.Sleep(150 * time.Millisecond) // past watchDelay: egret is waiting
		c.Close()
	}
	t.Run("http", func(t *testing.T) {
		c := dialRaw(t, l.Addr)
		c.Send("GET http://slow.test:%s/ HTTP/1.1\r\nHost: slow.test\r\n\r\n", oport)
		leave(c.C)
		wantClosed(t, originClosed, "the origin connection")
	})
	t.Run("connect", func(t *testing.T) {
		c := dialRaw(t, l.Addr)
		c.Send("CONNECT pooled.test:443 HTTP/1.1\r\nHost: pooled.test:443\r\n\r\n")
		leave(c.C)
		wantClosed(t, memberClosed, "the member's CONNECT")
	})
	t.Run("socks5", func(t *testing.T) {
		c, err := net.Dial("tcp", l.socksAddr)
		if err != nil {
			t.Fatal(err)
		}
		// Method negotiation (no auth), then CONNECT pooled.test:443.
		c.Write([]byte{5, 1, 0})
		var b [2]byte
		io.ReadFull(c, b[:])
		name := "pooled.test"
		c.Write(append(append([]byte{5, 1, 0, 3, byte(len(name))}, name...), 1, 187))
		leave(c)
		wantClosed(t, memberClosed, "the member's CONNECT")
	})
	t.Run("transparent", func(t *testing.T) {
		ap := netip.MustParseAddrPort("127.0.0.1:443")
		l.orig.Store(&ap)
		c := dialRaw(t, l.transAddr)
		c.Send("GET / HTTP/1.1\r\nHost: pooled.test\r\n\r\n")
		leave(c.C)
		wantClosed(t, memberClosed, "the member's CONNECT")
	})
	// One line per listener says the client left.
	waitFor(t, func() bool { return strings.Count(l.Log.String(), `"status":0,"error":"connection_terminated"`) == 4 })
}

// TestWatchReusedOnKeepAlive: the explicit listener's watch is one per
// connection, reused by each request: requests that wait past watchDelay
// (so the watch reads the client each time) are answered one after the
// other on one connection, and a client that leaves during a later wait
// still cancels it.
func TestWatchReusedOnKeepAlive(t *testing.T) {
	gaveUp := make(chan struct{}, 1)
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select {
			case <-r.Context().Done():
				gaveUp <- struct{}{}
			case <-time.After(10 * time.Second):
			}
			return
		}
		time.Sleep(2 * watchDelay)
		io.WriteString(w, "slow "+r.URL.Path)
	}))
	p := startProxy(t, proxyConf{hosts: map[string]string{"slow.test": "127.0.0.1"}})
	rc := dialRaw(t, p.Addr)
	for _, path := range []string{"/1", "/2", "/3"} {
		rc.Send("GET http://slow.test:%s%s HTTP/1.1\r\nHost: slow.test:%s\r\n\r\n", port, path, port)
		resp, body := rc.Read("GET")
		if resp.StatusCode != 200 || body != "slow "+path {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	rc.Send("GET http://slow.test:%s/hang HTTP/1.1\r\nHost: slow.test:%s\r\n\r\n", port, port)
	time.Sleep(2 * watchDelay)
	rc.C.Close()
	select {
	case <-gaveUp:
	case <-time.After(5 * time.Second):
		t.Fatal("the origin's request went on after the client left during a later wait")
	}
}

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"egret.io/egret/internal/metrics"
)

// rawProxy is a Server with an HTTP listener, to which tests add
// transparent and SOCKS5 listeners. Its direct dials never leave loopback:
// a dial to any other address is recorded and fails as "connection
// refused", so routing decisions about outside addresses are observable
// without sending a packet anywhere.
type rawProxy struct {
	*testProxy
	mu          sync.Mutex
	offLoopback []string // direct dials that were not made
}

func startRaw(t *testing.T, pc proxyConf) *rawProxy {
	t.Helper()
	return startRawWith(t, pc, nil)
}

// startRawWith is startRaw with a hook that edits the Options.
func startRawWith(t *testing.T, pc proxyConf, edit func(*Options)) *rawProxy {
	t.Helper()
	rp := &rawProxy{}
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().IsLoopback() {
			rp.mu.Lock()
			rp.offLoopback = append(rp.offLoopback, addr)
			rp.mu.Unlock()
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		return d.DialContext(ctx, network, addr)
	}
	rp.testProxy = startProxyWith(t, pc, func(o *Options) {
		if edit != nil {
			edit(o)
		}
		o.DialContext = dial
	})
	return rp
}

// notDialled returns the off-loopback direct dials that were refused.
func (p *rawProxy) notDialled() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.offLoopback...)
}

// transparent adds a transparent listener whose connections all claim orig
// as their original destination (nil: the real SO_ORIGINAL_DST lookup).
func (p *rawProxy) transparent(t *testing.T, orig func(net.Conn) (netip.AddrPort, error)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.ServeTransparent(ln, TransparentOptions{OriginalDst: orig})
	t.Cleanup(func() { ln.Close() })
	// ServeTransparent registers the listener (for the loop guard) in its
	// own goroutine: wait for it before the test connects.
	a := netip.MustParseAddrPort(ln.Addr().String())
	deadline := time.Now().Add(5 * time.Second)
	for !p.raw.isSelf(a) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return ln.Addr().String()
}

// fixed returns an OriginalDst that always answers ap.
func fixed(ap string) func(net.Conn) (netip.AddrPort, error) {
	a := netip.MustParseAddrPort(ap)
	return func(net.Conn) (netip.AddrPort, error) { return a, nil }
}

// logLine waits for an access log line of kind whose dest is dest and
// returns it decoded.
func (p *rawProxy) logLine(t *testing.T, kind, dest string) map[string]any {
	t.Helper()
	return p.logLineAfter(t, 0, kind, dest)
}

// logLineAfter is logLine for the lines written after the first off bytes
// of the log.
func (p *rawProxy) logLineAfter(t *testing.T, off int, kind, dest string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, l := range strings.Split(p.Log.String()[off:], "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) != nil {
				continue
			}
			if m["kind"] == kind && m["dest"] == dest && (m["msg"] == "tunnel") {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s access log line for %s in:\n%s", kind, dest, p.Log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantFields checks fields of a decoded log line (numbers compare as
// their decimal text).
func wantFields(t *testing.T, line map[string]any, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got := ""
		switch x := line[k].(type) {
		case nil:
		case string:
			got = x
		case float64:
			got = fmt.Sprint(x)
		default:
			got = fmt.Sprint(x)
		}
		if got != v {
			t.Errorf("log %s = %q, want %q (line %v)", k, got, v, line)
		}
	}
}

// tlsOrigin starts an HTTPS server on loopback with cert; it answers with
// the TLS server name and Host it saw.
func tlsOrigin(t *testing.T, cert tls.Certificate) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls origin sni=%s host=%s", r.TLS.ServerName, r.Host)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return port
}

// recordingUpstream is a fake upstream proxy that records CONNECT targets
// and refuses them with 403, so nothing is ever dialled.
func recordingUpstream(t *testing.T) (addr string, targets chan string) {
	return refusingUpstream(t, func(r *http.Request) string { return r.Method + " " + r.RequestURI })
}

// refusingUpstream is a fake upstream proxy that sends record(request) of
// each request it reads to the channel and refuses it with 403.
func refusingUpstream(t *testing.T, record func(*http.Request) string) (addr string, got chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				got <- record(req)
				fmt.Fprint(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
		}
	}()
	return ln.Addr().String(), got
}

// counterValue sums the samples of counter name whose labels include want.
func counterValue(t *testing.T, m *metrics.Metrics, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, mt := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range mt.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metric
				}
			}
			sum += mt.GetCounter().GetValue()
		}
	}
	return sum
}

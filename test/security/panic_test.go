package security

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/dnstest"
)

// panicSecret is in every value the tests panic with: it must never reach
// a log.
const panicSecret = "panic-secret-9d1e"

// explodingConn panics on Read: a defect deep in one tunnel's relay.
type explodingConn struct{ net.Conn }

func (c explodingConn) Read([]byte) (int, error) {
	panic(fmt.Errorf("token %s", panicSecret))
}

// TestPanicEndsOneTunnel: a panic in one tunnel's relay goroutine, or in an
// intercepted tunnel's dial on the engine's goroutines, closes that tunnel
// (or fails that request), is counted in egret_proxy_panics_total and
// logged without the panic's value; the process and the other tunnels go
// on. Before, such a panic ended the process.
func TestPanicEndsOneTunnel(t *testing.T) {
	m := metrics.New("test")
	var armed atomic.Bool
	logs := &testutil.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	t.Run("relay", func(t *testing.T) {
		_, _, port := origins(t, "")
		g := startGateway(t, nil, dnstest.Fixed(map[string][]string{"boom.test": {allowedIP}, "calm.test": {allowedIP}}), func(o *proxy.Options) {
			o.Metrics = m
			o.Logger = logger
			dial := o.DialContext
			o.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dial(ctx, network, addr)
				if err == nil && armed.Load() {
					return explodingConn{c}, nil
				}
				return c, err
			}
		})
		armed.Store(true)
		src := g.pod("team")
		c, br, st := g.open(t, "connect", src, "boom.test:"+port, netip.AddrPort{})
		if c == nil {
			t.Fatalf("CONNECT: %d", st)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: boom.test\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.ReadByte(); err == nil {
			t.Error("the tunnel whose relay panicked answered")
		}
		armed.Store(false)
		if body, st := g.get(t, "connect", g.pod("team"), "calm.test:"+port, "calm.test", netip.AddrPort{}); body != "hello from allowed" {
			t.Errorf("after the panic another tunnel got %q %d", body, st)
		}
		waitCount(t, m, "relay", 1)
	})
	t.Run("intercept-dial", func(t *testing.T) {
		var dials atomic.Int32
		l := startIntercepting(t, func(o *proxy.Options) {
			o.Metrics = m
			o.Logger = logger
			dial := o.DialContext
			o.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if strings.HasPrefix(addr, allowedIP+":") && dials.Add(1) == 2 {
					panic(fmt.Errorf("dialling with %s", panicSecret))
				}
				return dial(ctx, network, addr)
			}
		})
		// Two concurrent streams to an HTTP/1.1 origin: the second needs a
		// second connection, whose dial panics.
		f, tc := l.h2(t, "api.test")
		defer tc.Close()
		f.headers(t, 1, true, ":method", "GET", ":scheme", "https", ":authority", "api.test", ":path", "/slow/1")
		deadline := time.Now().Add(5 * time.Second)
		for l.origin.slow.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		f.headers(t, 3, true, ":method", "GET", ":scheme", "https", ":authority", "api.test", ":path", "/v1/x")
		tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if st, _ := f.response(t, 3); st != 500 && st != 502 {
			t.Errorf("the stream whose dial panicked: %d, want 500 or 502", st)
		}
		waitCount(t, m, "intercept", 1)
		// The process goes on: a new tunnel works.
		tc2, err := l.tunnel(t, "connect", "api.test", "api.test")
		if err != nil {
			t.Fatal(err)
		}
		defer tc2.Close()
	})
	if s := logs.String(); strings.Contains(s, panicSecret) || !strings.Contains(s, "panic recovered") {
		t.Errorf("the log shows the panic's value, or no panic:\n%s", s)
	}
}

// panics reads egret_proxy_panics_total{where} from m's registry.
func panics(t *testing.T, m *metrics.Metrics, where string) float64 {
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "egret_proxy_panics_total" {
			continue
		}
		for _, c := range mf.GetMetric() {
			for _, l := range c.GetLabel() {
				if l.GetName() == "where" && l.GetValue() == where {
					return c.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func waitCount(t *testing.T, m *metrics.Metrics, where string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for panics(t, m, where) < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := panics(t, m, where); got != want {
		t.Errorf("egret_proxy_panics_total{where=%q} = %v, want %v", where, got, want)
	}
}

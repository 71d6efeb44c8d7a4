package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/route"
	"egret.io/egret/internal/socks5"
	"egret.io/egret/internal/testutil"
)

// walkRecorder records, at the points where a request's walk touches the
// outside — the lookup of its destination, the dial, the access log's
// write — the egret source files on the goroutine's stack, outermost
// first.
type walkRecorder struct {
	mu    sync.Mutex
	walks map[string][][]string // by point
}

func (w *walkRecorder) record(point string) {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var files []string
	for {
		f, more := frames.Next()
		if i := strings.Index(f.File, "/internal/"); i >= 0 && !strings.HasSuffix(f.File, "_test.go") {
			files = append(files, f.File[i+1:])
		}
		if !more {
			break
		}
	}
	// outermost first, a file's consecutive frames as one step
	var walk []string
	for i := len(files) - 1; i >= 0; i-- {
		if len(walk) == 0 || walk[len(walk)-1] != files[i] {
			walk = append(walk, files[i])
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.walks[point] = append(w.walks[point], walk)
}

// check fails when a walk enters a file again after leaving it for
// another: a call that goes back up (a callback into a file the walk
// came through).
func (w *walkRecorder) check(t *testing.T, name string, points ...string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, point := range points {
		walks := w.walks[point]
		if len(walks) == 0 {
			t.Errorf("%s: no %s was recorded", name, point)
		}
		for _, walk := range walks {
			t.Logf("%s, %s: %s", name, point, strings.Join(walk, " → "))
			seen := map[string]bool{}
			for _, f := range walk {
				if seen[f] {
					t.Errorf("%s: the walk to the %s returns to %s: %s", name, point, f, strings.Join(walk, " → "))
				}
				seen[f] = true
			}
		}
	}
	w.walks = map[string][][]string{}
}

type recordingResolver struct {
	Resolver
	w *walkRecorder
}

func (r recordingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.w.record("lookup")
	return r.Resolver.LookupNetIP(ctx, network, host)
}

// recordingListener's connections record the walk at every write to the
// client: the answers (a 200 to a CONNECT, a refusal, a response) and the
// relay's bytes.
type recordingListener struct {
	net.Listener
	w *walkRecorder
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return recordingConn{Conn: c, w: l.w}, nil
}

type recordingConn struct {
	net.Conn
	w *walkRecorder
}

func (c recordingConn) Write(p []byte) (int, error) {
	c.w.record("answer")
	return c.Conn.Write(p)
}

type recordingLog struct {
	*testutil.SyncBuffer
	w *walkRecorder
}

func (l recordingLog) Write(p []byte) (int, error) {
	l.w.record("log")
	return l.SyncBuffer.Write(p)
}

// TestWalks follows a CONNECT tunnel and a forwarded GET to a name (so
// that it is looked up), from the listener through admission, the
// transport and the relay to the answers and the access log, and a
// refused CONNECT, and checks that no step calls back into a file the
// walk left: the data flows one way (see docs/architecture.md, "Following
// a request").
func TestWalks(t *testing.T) {
	w := &walkRecorder{walks: map[string][][]string{}}
	logs := &testutil.SyncBuffer{}
	deny := []route.Rule{{Action: route.Deny, Match: route.Match{Hosts: []string{"denied.test"}}, Source: "test"}}
	p := startProxyWith(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}, rules: deny}, func(o *Options) {
		o.Resolver = recordingResolver{Resolver: o.Resolver, w: w}
		o.AccessLog = recordingLog{SyncBuffer: logs, w: w}
		o.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			w.record("dial")
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Server.Serve(recordingListener{Listener: ln, w: w})
	addr := ln.Addr().String()

	t.Run("CONNECT", func(t *testing.T) {
		port := tcpOriginB(t)
		c, br, resp := connect(t, addr, "origin.test:"+port, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT answered %d", resp.StatusCode)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n")
		got, _ := io.ReadAll(br)
		c.Close()
		if !strings.HasSuffix(string(got), "pong") {
			t.Fatalf("through the tunnel: %q", got)
		}
		waitFor(t, func() bool { return strings.Contains(logs.String(), `"kind":"connect"`) })
		w.check(t, "CONNECT", "lookup", "dial", "answer", "log")
	})

	t.Run("SOCKS5", func(t *testing.T) {
		sln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go p.Server.ServeSOCKS(recordingListener{Listener: sln, w: w}, SOCKSOptions{})
		port := tcpOriginB(t)
		n, _ := strconv.Atoi(port)
		code, c := socksConnect(t, sln.Addr().String(), "origin.test", uint16(n))
		if code != socks5.Succeeded {
			t.Fatalf("SOCKS5 reply %d", code)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasSuffix(string(got), "pong") {
			t.Fatalf("through the tunnel: %q", got)
		}
		waitFor(t, func() bool { return strings.Contains(logs.String(), `"kind":"socks5"`) })
		w.check(t, "SOCKS5", "lookup", "dial", "answer", "log")
	})

	t.Run("refused CONNECT", func(t *testing.T) {
		c, _, resp := connect(t, addr, "denied.test:443", "")
		c.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("CONNECT to a denied host answered %d", resp.StatusCode)
		}
		waitFor(t, func() bool { return strings.Contains(logs.String(), `"dest":"denied.test:443"`) })
		w.check(t, "refused CONNECT", "answer", "log")
	})

	t.Run("forwarded GET", func(t *testing.T) {
		port := benchOrigin(t)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET http://origin.test:"+port+"/small HTTP/1.1\r\nHost: origin.test:"+port+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("forwarded GET answered %d", resp.StatusCode)
		}
		waitFor(t, func() bool { return strings.Contains(logs.String(), `"kind":"http"`) })
		w.check(t, "forwarded GET", "lookup", "dial", "answer", "log")
	})
}

package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil"
)

// BenchmarkForward measures one keep-alive request through the explicit
// listener, both sides kept alive, against a minimal loopback origin: the
// client and the origin are raw sockets with fixed messages, so the
// allocations reported are (nearly all) egret's own. Metrics and the access
// log are on, as in production (the log goes to io.Discard).
func BenchmarkForward(b *testing.B) {
	for _, tc := range []struct {
		name, req string
	}{
		{"get", "GET http://origin.test:%PORT%/small HTTP/1.1\r\nHost: origin.test:%PORT%\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"},
		{"post", "POST http://origin.test:%PORT%/small HTTP/1.1\r\nHost: origin.test:%PORT%\r\nUser-Agent: bench\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"hello\":\"world\"}"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			port := benchOrigin(b)
			addr := startBenchProxy(b)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req := []byte(strings.ReplaceAll(tc.req, "%PORT%", port))
			// The first exchange learns the response's length; the others
			// read exactly that many bytes.
			c.Write(req)
			cr := &countReader{r: c}
			br := bufio.NewReader(cr)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != strings.Repeat("x", 64) {
				b.Fatalf("got %d %q", resp.StatusCode, body)
			}
			total := int(cr.n) - br.Buffered()
			buf := make([]byte, total)
			b.ReportAllocs()
			b.ResetTimer()
			defer cpuPerOp(b)()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if !strings.HasSuffix(string(buf), strings.Repeat("x", 64)) {
				b.Fatalf("last response %q", buf)
			}
		})
	}
}

// cpuPerOp reports the CPU time the process spent (user and system, every
// goroutine: egret, and the benchmark's client and origin) per operation,
// as cpu-ns/op — a figure a busy machine disturbs less than the wall
// time. Call it when the loop starts; call what it returns when it ends.
func cpuPerOp(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// benchOrigin answers every request on a keep-alive connection with the
// same 64-byte response, reading the request's Content-Length body.
func benchOrigin(b testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	resp := []byte("HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 64\r\n\r\n" + strings.Repeat("x", 64))
	testutil.Serve(b, ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			cl := 0
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(line) <= 2 {
					break
				}
				if len(line) > 16 && strings.EqualFold(string(line[:15]), "content-length:") {
					for _, ch := range line[15:] {
						if ch >= '0' && ch <= '9' {
							cl = cl*10 + int(ch-'0')
						}
					}
				}
			}
			if cl > 0 {
				if _, err := br.Discard(cl); err != nil {
					return
				}
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// startBenchProxy starts a Server with metrics and an access log, routing
// everything direct.
func startBenchProxy(b testing.TB) string {
	_, addr := startBenchServer(b, Options{Metrics: metrics.New("bench"), AccessLog: io.Discard})
	return addr
}

// startBenchServer starts a Server with options o that routes everything
// direct and resolves origin.test to loopback; it is shut down when the
// benchmark ends.
func startBenchServer(b testing.TB, o Options) (*Server, string) {
	tbl, err := route.New(nil, route.Direct, "")
	if err != nil {
		b.Fatal(err)
	}
	o.Via = "egret-bench"
	o.Resolver = hosts(map[string]string{"origin.test": "127.0.0.1"})
	s, err := New(o, &State{Routes: tbl})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, ln.Addr().String()
}

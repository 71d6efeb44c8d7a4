package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// smallBody is what the origin's /small answers: the http and setup tests
// fetch it, so they measure per-request and per-tunnel costs, not bytes.
const smallBody = 64

// origin is the HTTP server every workload reaches, through a proxy or
// directly: /small answers smallBody bytes, /bytes?n=N answers N zero bytes.
type origin struct {
	Addr string // host:port
	srv  *http.Server
}

func startOrigin(listen string) (*origin, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("origin: %w", err)
	}
	o := &origin{Addr: ln.Addr().String(), srv: &http.Server{Handler: originHandler(), ErrorLog: discardLog}}
	go o.srv.Serve(ln)
	return o, nil
}

// originHandler answers /small and /bytes.
func originHandler() http.Handler {
	small := make([]byte, smallBody)
	for i := range small {
		small[i] = 'x'
	}
	zeros := make([]byte, 256<<10)
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(small)))
		w.Write(small)
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "n: want a byte count", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			b := zeros[:min(n, int64(len(zeros)))]
			if _, err := w.Write(b); err != nil {
				return
			}
			n -= int64(len(b))
		}
	})
	return mux
}

func (o *origin) Close() { o.srv.Close() }

// target is where a workload goes: through Proxy (a URL; "" = directly) to
// Host (host:port, the origin as this proxy is asked for it).
type target struct {
	Proxy string
	Host  string
}

// opStats is what the loops of the http and setup tests count.
type opStats struct {
	ops, errs atomic.Int64
	mu        sync.Mutex
	lat       []time.Duration
	firstErr  atomic.Pointer[error]
}

func (s *opStats) fail(err error) {
	s.errs.Add(1)
	s.firstErr.CompareAndSwap(nil, &err)
}

func (s *opStats) add(lat []time.Duration) {
	s.mu.Lock()
	s.lat = append(s.lat, lat...)
	s.mu.Unlock()
}

// result fills r from the counts, over the elapsed wall time.
func (s *opStats) result(r *Result, elapsed time.Duration) {
	r.Ops, r.Errors, r.Seconds = s.ops.Load(), s.errs.Load(), elapsed.Seconds()
	if e := s.firstErr.Load(); e != nil {
		r.FirstError = (*e).Error()
	}
	slices.Sort(s.lat)
	r.P50ms, r.P99ms = quantileMs(s.lat, 0.50), quantileMs(s.lat, 0.99)
}

// quantileMs is the q-quantile of sorted durations, in milliseconds (0 when empty).
func quantileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(float64(len(sorted)-1)*q)]) / float64(time.Millisecond)
}

// loop runs conc clients calling op until d has passed (or ctx ends); each
// client calls setup once first. It returns the wall time until the last
// client finished.
func loop(ctx context.Context, conc int, d time.Duration, s *opStats, client func() (op func() error, done func())) time.Duration {
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			op, done := client()
			defer done()
			lat := make([]time.Duration, 0, 1024)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				if err := op(); err != nil {
					s.fail(err)
					time.Sleep(time.Millisecond) // a refusing proxy must not turn the loop into a spin
					continue
				}
				s.ops.Add(1)
				lat = append(lat, time.Since(t0))
			}
			s.add(lat)
		})
	}
	wg.Wait()
	return time.Since(start)
}

// runHTTP: each of conc clients keeps one connection to the proxy and sends
// GET http://host/small on it, one request at a time.
func runHTTP(ctx context.Context, t target, conc int, d time.Duration) Result {
	var s opStats
	u := "http://" + t.Host + "/small"
	elapsed := loop(ctx, conc, d, &s, func() (func() error, func()) {
		tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true, ResponseHeaderTimeout: 10 * time.Second}
		if t.Proxy != "" {
			pu, _ := url.Parse(t.Proxy)
			tr.Proxy = http.ProxyURL(pu)
		}
		cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		return func() error {
			resp, err := cl.Get(u)
			if err != nil {
				return err
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return wantBody(resp, n, err, smallBody)
		}, tr.CloseIdleConnections
	})
	var r Result
	s.result(&r, elapsed)
	return r
}

// wantBody checks a response: 200 and exactly n bytes of body.
func wantBody(resp *http.Response, got int64, err error, n int64) error {
	switch {
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("GET: %s", resp.Status)
	case err != nil:
		return fmt.Errorf("GET: body: %w", err)
	case got != n:
		return fmt.Errorf("GET: %d bytes of body, want %d", got, n)
	}
	return nil
}

// dialTunnel opens a CONNECT tunnel to t.Host through t.Proxy, or a plain
// connection to t.Host when there is no proxy. The reader holds what the
// proxy sent behind its answer.
func dialTunnel(t target) (net.Conn, *bufio.Reader, error) {
	addr := t.Host
	if t.Proxy != "" {
		u, err := url.Parse(t.Proxy)
		if err != nil {
			return nil, nil, err
		}
		addr = u.Host
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	if t.Proxy == "" {
		return c, br, nil
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", t.Host, t.Host); err != nil {
		c.Close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT: %s", resp.Status)
	}
	c.SetDeadline(time.Time{})
	return c, br, nil
}

// getThrough sends GET path with Connection: close on an open tunnel and
// reads the answer, wanting n bytes of body; it returns the bytes read.
func getThrough(c net.Conn, br *bufio.Reader, host, path string, n int64, buf []byte) (int64, error) {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, fmt.Errorf("GET: %w", err)
	}
	got, err := io.CopyBuffer(io.Discard, resp.Body, buf)
	resp.Body.Close()
	return got, wantBody(resp, got, err, n)
}

// runSetup: each of conc clients opens a tunnel, fetches /small through it
// and closes it, again and again.
func runSetup(ctx context.Context, t target, conc int, d time.Duration) Result {
	var s opStats
	elapsed := loop(ctx, conc, d, &s, func() (func() error, func()) {
		buf := make([]byte, 4096)
		return func() error {
			c, br, err := dialTunnel(t)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = getThrough(c, br, t.Host, "/small", smallBody, buf)
			return err
		}, func() {}
	})
	var r Result
	s.result(&r, elapsed)
	return r
}

// runBulk: one tunnel, one GET of n bytes; the clock runs from the request
// to the last byte.
func runBulk(ctx context.Context, t target, n int64) Result {
	var r Result
	c, br, err := dialTunnel(t)
	if err != nil {
		r.Errors, r.FirstError = 1, err.Error()
		return r
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(2*time.Minute + time.Duration(n/(10<<20))*time.Second)) // 10 MB/s at worst
	start := time.Now()
	got, err := getThrough(c, br, t.Host, "/bytes?n="+strconv.FormatInt(n, 10), n, make([]byte, 256<<10))
	r.Seconds, r.Bytes = time.Since(start).Seconds(), got
	if err != nil {
		r.Errors, r.FirstError = 1, err.Error()
	}
	return r
}

// idleStage is one count of the idle test: the tunnels asked for, those
// still open when the proxy's RSS was read, and that RSS.
type idleStage struct {
	Tunnels int   `json:"tunnels"`
	Held    int   `json:"held"`
	RSSKiB  int64 `json:"rss_kib,omitempty"`
}

// idleSettle is how long the idle test waits after opening the tunnels of a
// stage before it reads the proxy's RSS: time for the proxy to park them.
const idleSettle = 500 * time.Millisecond

// runIdle opens CONNECT tunnels (64 at a time) and sends nothing on them;
// at each count (ascending) it waits idleSettle, counts the tunnels the
// proxy has not closed and reads its RSS. rss may be nil (direct).
func runIdle(ctx context.Context, t target, counts []int, rss func() (int64, error), stageTimeout time.Duration) Result {
	var r Result
	if rss != nil {
		r.BaseRSSKiB, _ = rss()
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		errs  atomic.Int64
		first atomic.Pointer[error]
	)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, n := range counts {
		stageEnd := time.Now().Add(stageTimeout)
		var next atomic.Int64
		next.Store(int64(len(conns)))
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for ctx.Err() == nil && next.Add(1) <= int64(n) && time.Now().Before(stageEnd) {
					c, _, err := dialTunnel(t)
					if err != nil {
						errs.Add(1)
						first.CompareAndSwap(nil, &err)
						continue
					}
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		time.Sleep(idleSettle)
		st := idleStage{Tunnels: n, Held: countOpen(conns)}
		if rss != nil {
			v, err := rss()
			if err != nil {
				errs.Add(1)
				first.CompareAndSwap(nil, &err)
			}
			st.RSSKiB = v
		}
		r.Idle = append(r.Idle, st)
		if ctx.Err() != nil {
			break
		}
	}
	r.Errors = errs.Load()
	if e := first.Load(); e != nil {
		r.FirstError = (*e).Error()
	}
	return r
}

// countOpen counts the connections the other side has not closed: a
// non-blocking peek finds nothing to read (EAGAIN) on an open idle
// connection and end of stream on a closed one.
func countOpen(conns []net.Conn) int {
	open := 0
	var b [1]byte
	for _, c := range conns {
		sc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			continue
		}
		alive := false
		sc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			alive = n > 0 || errors.Is(err, syscall.EAGAIN)
			return true // never wait
		})
		if alive {
			open++
		}
	}
	return open
}

// startTLSOrigin serves the origin's handler over TLS with cert (HTTP/2 and
// HTTP/1.1), for the intercept tests.
func startTLSOrigin(listen string, cert tls.Certificate) (*origin, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("TLS origin: %w", err)
	}
	o := &origin{Addr: ln.Addr().String(), srv: &http.Server{Handler: originHandler(), ErrorLog: discardLog,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}}
	go o.srv.ServeTLS(ln, "", "")
	return o, nil
}

// dialTLSThrough opens a tunnel to t.Host (through t.Proxy, or directly)
// and runs a full TLS handshake in it with cfg: no session is resumed.
func dialTLSThrough(t target, cfg *tls.Config) (*tls.Conn, *bufio.Reader, error) {
	c, br, err := dialTunnel(t)
	if err != nil {
		return nil, nil, err
	}
	if br.Buffered() > 0 {
		c.Close()
		return nil, nil, errors.New("CONNECT: bytes after the answer")
	}
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, bufio.NewReader(tc), nil
}

// getKeepAlive sends GET path on a kept-alive connection and reads the
// answer, wanting n bytes of body.
func getKeepAlive(c net.Conn, br *bufio.Reader, host, path string, n int64, buf []byte) error {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("GET: %w", err)
	}
	got, err := io.CopyBuffer(io.Discard, resp.Body, buf)
	resp.Body.Close()
	return wantBody(resp, got, err, n)
}

// runInterceptSetup: each of conc clients opens a tunnel, runs a full TLS
// handshake in it, fetches /small with Connection: close and closes it.
func runInterceptSetup(ctx context.Context, t target, cfg *tls.Config, conc int, d time.Duration) Result {
	var s opStats
	elapsed := loop(ctx, conc, d, &s, func() (func() error, func()) {
		buf := make([]byte, 4096)
		return func() error {
			c, br, err := dialTLSThrough(t, cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = getThrough(c, br, t.Host, "/small", smallBody, buf)
			return err
		}, func() {}
	})
	var r Result
	s.result(&r, elapsed)
	return r
}

// runInterceptKA: each of conc clients keeps one intercepted TLS
// connection and sends GET /small on it, one request at a time.
func runInterceptKA(ctx context.Context, t target, cfg *tls.Config, conc int, d time.Duration) Result {
	var s opStats
	elapsed := loop(ctx, conc, d, &s, func() (func() error, func()) {
		buf := make([]byte, 4096)
		var c *tls.Conn
		var br *bufio.Reader
		return func() error {
				if c == nil {
					var err error
					if c, br, err = dialTLSThrough(t, cfg); err != nil {
						return err
					}
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if err := getKeepAlive(c, br, t.Host, "/small", smallBody, buf); err != nil {
					c.Close()
					c = nil
					return err
				}
				return nil
			}, func() {
				if c != nil {
					c.Close()
				}
			}
	})
	var r Result
	s.result(&r, elapsed)
	return r
}

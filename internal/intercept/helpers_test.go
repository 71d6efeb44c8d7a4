package intercept

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/tlslab"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// lab is an interception setup for tests: the interception CA and Issuer,
// an Engine, TLS origins signed by a test "public" CA, and a CONNECT front
// that hands every admitted tunnel to the Engine.
type lab struct {
	t        testing.TB
	originCA *tlslab.CA
	caCert   []byte // the interception CA's certificate (PEM)
	issuer   *Issuer
	engine   *Engine
	front    string // host:port of the CONNECT front

	// tunnelUnlisted relays hosts without a site as opaque tunnels
	// (else the engine intercepts them with no rules).
	tunnelUnlisted bool

	mu      sync.Mutex
	routes  map[string]string // CONNECT host → origin address
	sites   Sites
	events  []*Event
	results []tunnelResult
}

type tunnelResult struct {
	res Result
	err error
}

func newLab(t testing.TB) *lab {
	t.Helper()
	l := &lab{t: t, originCA: tlslab.NewCA(t, "egret test public root"), routes: map[string]string{}}
	certPEM, keyPEM, err := GenerateCA("egret test interception CA", 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseAuthority(certPEM, keyPEM, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l.caCert = certPEM
	l.issuer = &Issuer{}
	l.issuer.SetAuthority(a)
	roots := x509.NewCertPool()
	roots.AddCert(l.originCA.Cert)
	l.engine = &Engine{Issuer: l.issuer, RootCAs: roots, Log: func(ev *Event) {
		l.mu.Lock()
		l.events = append(l.events, ev)
		l.mu.Unlock()
	}}
	l.front = l.startFront()
	return l
}

// origin starts a TLS origin for name (h2 and http/1.1) signed by ca (the
// lab's public CA when nil) and routes CONNECTs for name to it.
func (l *lab) origin(name string, ca *tlslab.CA, h http.Handler) string {
	l.t.Helper()
	if ca == nil {
		ca = l.originCA
	}
	if h == nil {
		h = echoHandler()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		l.t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ErrorLog: discardLog,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{ca.Leaf(l.t, name)}, NextProtos: []string{"h2", "http/1.1"}}}
	go srv.ServeTLS(ln, "", "")
	l.t.Cleanup(func() { srv.Close() })
	l.mu.Lock()
	l.routes[name] = ln.Addr().String()
	l.mu.Unlock()
	return ln.Addr().String()
}

// startFront accepts CONNECTs, answers 200, and hands the tunnel to the
// engine (a site from l.sites) or relays it (no site).
func (l *lab) startFront() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	l.t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { l.handle(ctx, c) })
		}
	}()
	return ln.Addr().String()
}

func (l *lab) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect {
		return
	}
	host, port, err := net.SplitHostPort(req.Host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 400 Bad Request\r\n\r\n")
		return
	}
	l.mu.Lock()
	addr, ok := l.routes[host]
	site := l.sites.Lookup(host)
	tunnelUnlisted := l.tunnelUnlisted
	l.mu.Unlock()
	if !ok {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	var client net.Conn = c
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		client = &replayConn{Conn: c, buf: append([]byte(nil), b...)}
	}
	if site == nil && tunnelUnlisted {
		o, err := dial(ctx)
		if err != nil {
			return
		}
		relay(client, o)
		return
	}
	res, err := l.engine.Serve(ctx, client, &Tunnel{
		Host: host, Port: port, Client: c.RemoteAddr().String(), Workload: "test/app", Site: site, Dial: dial,
		Passthrough: func(conn net.Conn) error {
			o, err := dial(ctx)
			if err != nil {
				return err
			}
			relay(conn, o)
			return nil
		},
	})
	l.mu.Lock()
	l.results = append(l.results, tunnelResult{res, err})
	l.mu.Unlock()
}

func relay(a, b net.Conn) {
	defer b.Close()
	done := make(chan struct{})
	go func() { io.Copy(b, a); b.(*net.TCPConn).CloseWrite(); close(done) }()
	io.Copy(a, b)
	<-done
}

// setSites replaces the lab's intercepted sites.
// tunnel opens a CONNECT tunnel to host's origin through the lab's front
// (closed when the test ends) and returns it after the 200.
func (l *lab) tunnel(t testing.TB, host string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", l.front)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s:%s HTTP/1.1\r\nHost: x\r\n\r\n", host, port(l, host))
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatal(resp, err)
	}
	return c, br
}

func (l *lab) setSites(ss ...*Site) {
	l.mu.Lock()
	l.sites = ss
	l.mu.Unlock()
}

// client returns a Go client through the front that trusts the
// interception CA; h2 says whether it offers HTTP/2.
func (l *lab) client(h2 bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(l.caCert)
	pu, _ := url.Parse("http://" + l.front)
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	l.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func (l *lab) logged() []*Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Event(nil), l.events...)
}

func (l *lab) tunnels() []tunnelResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]tunnelResult(nil), l.results...)
}

// seen is what the echo origin reports about a request.
type seen struct {
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query"`
	Proto   string              `json:"proto"`
	Host    string              `json:"host"`
	Headers map[string][]string `json:"headers"`
	Body    int                 `json:"body"`
}

// sseGates holds the go-aheads of /sse?gate=ID: the origin sends event 0,
// then waits for the channel stored under ID to close before the others —
// a stream that is buffered on its way never shows event 0 to the client.
var sseGates sync.Map

// echoHandler answers with what it received, and serves the streaming
// endpoints: /sse (events one by one, 300 ms apart or, with ?gate=ID, the
// rest once sseGates[ID] closes), /ws (a WebSocket echo), /stream (echoes
// the body as it arrives).
func echoHandler() http.Handler {
	ws := websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) })
	sse := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		gate, gated := sseGates.Load(r.URL.Query().Get("gate"))
		for i := range 3 {
			fmt.Fprintf(w, "data: event %d\n\n", i)
			w.(http.Flusher).Flush()
			if !gated {
				time.Sleep(300 * time.Millisecond)
				continue
			}
			if i == 0 {
				select {
				case <-gate.(chan struct{}):
				case <-r.Context().Done():
					return
				}
			}
		}
	}
	stream := func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		w.WriteHeader(200)
		rc.Flush()
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				rc.Flush()
			}
			if err != nil {
				return
			}
		}
	}
	// No ServeMux: it would redirect paths it cleans, and the tests look
	// at the path exactly as egret sent it.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ws":
			ws.ServeHTTP(w, r)
			return
		case "/sse":
			sse(w, r)
			return
		case "/stream":
			stream(w, r)
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(seen{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Proto: r.Proto,
			Host: r.Host, Headers: r.Header, Body: int(n)})
	})
}

// get sends a request through c and decodes the echo.
func get(t testing.TB, c *http.Client, method, u string, hdr map[string]string, body io.Reader) (*http.Response, seen) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var s seen
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	} else {
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
	}
	return resp, s
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

func randReader() io.Reader { return rand.Reader }

func bigOne() *big.Int { return big.NewInt(time.Now().UnixNano()) }

func pkixName(cn string) pkix.Name { return pkix.Name{CommonName: cn} }

package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/proxytest"
	"egret.io/egret/internal/upstream"
)

// hosts is a test resolver: names map to loopback addresses; anything else
// does not exist. Nothing ever reaches real DNS.
func hosts(m map[string]string) *resolve.Cache {
	h := map[string][]netip.Addr{}
	for n, a := range m {
		h[n] = []netip.Addr{netip.MustParseAddr(a)}
	}
	return resolve.New(resolve.Config{Hosts: h}, func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	})
}

type testProxy struct {
	*Server
	Addr    string
	URL     *url.URL
	Log     *flushLog
	Metrics *metrics.Metrics
}

// flushLog is a test proxy's log (the process log and the access log):
// String returns it once the access log lines of what ended, and of the
// requests being answered, are written (Server.FlushAccessLog) — the
// lines are written off the connections' goroutines.
type flushLog struct {
	*testutil.SyncBuffer
	s *Server
}

func (l *flushLog) String() string {
	l.s.FlushAccessLog()
	return l.SyncBuffer.String()
}

type proxyConf struct {
	rules    []route.Rule
	def      route.Action
	members  []string           // default pool, each "URL [attributes]" (ParseMemberSpec)
	creds    *credentials.Store // the default pool's shared credentials
	hosts    map[string]string
	timeouts Timeouts
}

func startProxy(t testing.TB, pc proxyConf) *testProxy {
	t.Helper()
	return startProxyWith(t, pc, nil)
}

// state builds the routes and the default pool pc describes: the default
// route is upstream when pc names members, direct otherwise.
func (pc proxyConf) state(t testing.TB) *State {
	t.Helper()
	if pc.def == 0 {
		pc.def = route.Direct
		if len(pc.members) > 0 {
			pc.def = route.Upstream
		}
	}
	tbl, err := route.New(pc.rules, pc.def, "")
	if err != nil {
		t.Fatal(err)
	}
	st := &State{Routes: tbl, Pools: map[string]*upstream.Pool{}, DefaultPool: "default"}
	if len(pc.members) > 0 {
		p := &upstream.Pool{Name: "default", ConnectTimeout: 5 * time.Second, Credentials: pc.creds}
		for _, raw := range pc.members {
			m, err := upstream.ParseMemberSpec(raw)
			if err != nil {
				t.Fatal(err)
			}
			p.Members = append(p.Members, upstream.NewMember(m))
		}
		st.Pools["default"] = p
	}
	return st
}

// startProxyWith is startProxy with a hook that edits the Options.
func startProxyWith(t testing.TB, pc proxyConf, edit func(*Options)) *testProxy {
	t.Helper()
	st := pc.state(t)
	logs := &testutil.SyncBuffer{}
	lg := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := metrics.New("test")
	opts := Options{Via: "egret-test", Timeouts: pc.timeouts, Resolver: hosts(pc.hosts), Logger: lg, AccessLog: logs, Metrics: m}
	if edit != nil {
		edit(&opts)
	}
	s, err := New(opts, st)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		if t.Failed() {
			t.Logf("egret log:\n%s", logs.String())
		}
	})
	u, _ := url.Parse("http://" + ln.Addr().String())
	return &testProxy{Server: s, Addr: ln.Addr().String(), URL: u, Log: &flushLog{SyncBuffer: logs, s: s}, Metrics: m}
}

func (p *testProxy) client() *http.Client {
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(p.URL), DisableCompression: true},
		Timeout:   10 * time.Second,
	}
}

// The shared helpers of the data plane's tests (internal/testutil/proxytest).
type rawClient = proxytest.RawClient

func dialRaw(t *testing.T, addr string) *rawClient { return proxytest.DialRaw(t, addr) }

func origin(t *testing.T, h http.Handler, opts ...func(*http.Server)) (*httptest.Server, string) {
	t.Helper()
	return proxytest.Origin(t, h, opts...)
}

func wantProxyStatus(t *testing.T, resp *http.Response, body string, code int, errType string) {
	t.Helper()
	proxytest.WantProxyStatus(t, resp, body, code, errType)
}

func isTimeout(err error) bool { return proxytest.IsTimeout(err) }

// connect opens a CONNECT tunnel through proxy and returns the
// connection, a reader positioned after the proxy's answer, and the answer.
func connect(t *testing.T, proxyAddr, target string, extra string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, extra)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	return c, br, resp
}

var errTest = errors.New("test")

func deadAddr(t *testing.T) string { return proxytest.DeadAddr(t) }

func tcpOrigin(t *testing.T, fn func(net.Conn)) string { return proxytest.TCPOrigin(t, fn) }

func waitFor(t *testing.T, cond func() bool) { t.Helper(); proxytest.WaitFor(t, cond) }

func wantPlainClose(t *testing.T, addr, payload string) {
	t.Helper()
	proxytest.WantPlainClose(t, addr, payload)
}

func rawRequest(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	return proxytest.RawRequest(t, addr, raw)
}

func runCurl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return proxytest.RunCurl(t, args...)
}

package proxyd

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/proxytest"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// The upstream Squid's user and password (the password needs every kind
// of percent-encoding in a URL).
const (
	squidUser = "egret"
	squidPass = "p@ss:w/rd%"
	encPass   = "p%40ss%3Aw%2Frd%25"
	socksUser = "app"
	socksPass = "s0cks:p@ss"
)

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

func curl(t *testing.T, proxyAddr, url string, tunnel bool) (string, string, error) {
	t.Helper()
	return proxytest.Curl(t, proxyAddr, url, tunnel)
}

func deadAddr(t *testing.T) string { return proxytest.DeadAddr(t) }

func grep(s, substr string) string { return proxytest.Grep(s, substr) }

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

// Package proxytest has the helpers the data plane's tests share: raw
// client connections that read answers with net/http's parser, loopback
// origins, the checks of an answer egret made itself, the real curl
// through a proxy. Imported only by tests.
package proxytest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

// RawClient is one raw connection to a proxy; answers are read with
// net/http's parser.
type RawClient struct {
	t  *testing.T
	C  net.Conn
	BR *bufio.Reader
}

// DialRaw connects to addr; the connection closes when t ends and every
// read and write has 15 s.
func DialRaw(t *testing.T, addr string) *RawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(15 * time.Second))
	return &RawClient{t: t, C: c, BR: bufio.NewReader(c)}
}

// Send writes the formatted bytes.
func (r *RawClient) Send(format string, args ...any) {
	r.t.Helper()
	if _, err := fmt.Fprintf(r.C, format, args...); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

// Read reads one response to a request of method and its whole body.
func (r *RawClient) Read(method string) (*http.Response, string) {
	r.t.Helper()
	resp, err := http.ReadResponse(r.BR, &http.Request{Method: method})
	if err != nil {
		r.t.Fatalf("read response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("read body (%d): %v", resp.StatusCode, err)
	}
	return resp, string(b)
}

// Closed reports whether the proxy closed the connection (EOF or reset
// within 3s, with no further bytes).
func (r *RawClient) Closed() bool {
	r.C.SetReadDeadline(time.Now().Add(3 * time.Second))
	defer r.C.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := r.BR.ReadByte()
	if err == nil {
		r.t.Errorf("unexpected byte %q after the response", b)
		return false
	}
	return !IsTimeout(err)
}

// IsTimeout reports whether err is a network timeout.
func IsTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// Origin starts an HTTP server on loopback and returns it and its port.
func Origin(t testing.TB, h http.Handler, opts ...func(*http.Server)) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	for _, o := range opts {
		o(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return srv, port
}

// WantProxyStatus checks a response egret produced itself: its status, its
// RFC 9209 Proxy-Status error type and its one-line body.
func WantProxyStatus(t testing.TB, resp *http.Response, body string, code int, errType string) {
	t.Helper()
	if resp.StatusCode != code {
		t.Errorf("status = %d, want %d (body %q)", resp.StatusCode, code, body)
	}
	ps := resp.Header.Get("Proxy-Status")
	if !strings.HasPrefix(ps, "egret; error="+errType) {
		t.Errorf("Proxy-Status = %q, want egret; error=%s", ps, errType)
	}
	if strings.Count(strings.TrimSpace(body), "\n") != 0 || !strings.HasPrefix(body, "egret: ") {
		t.Errorf("body = %q, want one line starting with egret:", body)
	}
}

// Curl runs the real curl through proxyAddr; tunnel uses CONNECT (-p). It
// returns the status code curl reports, the body and curl's error.
func Curl(t testing.TB, proxyAddr, url string, tunnel bool) (code string, body string, err error) {
	t.Helper()
	bin := testutil.NeedTool(t, "curl")
	args := []string{"-sS", "--max-time", "15", "-x", "http://" + proxyAddr, "-o", "-", "-w", "\n%{http_code}", url}
	if tunnel {
		args = append([]string{"-p"}, args...)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	s := strings.TrimRight(string(out), "\n")
	i := strings.LastIndexByte(s, '\n')
	if i < 0 {
		return s, "", err
	}
	return s[i+1:], s[:i], err
}

// DeadAddr returns a loopback address nothing listens on.
func DeadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// Grep returns the lines of s that contain substr.
func Grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

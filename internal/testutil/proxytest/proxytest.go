// Package proxytest has the helpers the data plane's tests share: raw
// client connections that read answers with net/http's parser, loopback
// origins, the checks of an answer egret made itself, the real curl
// through a proxy. Imported only by tests.
package proxytest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
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

// TCPOrigin accepts TCP connections on loopback and runs fn on each (then
// closes it); it returns the port.
func TCPOrigin(t testing.TB, fn func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); fn(c) }()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// WaitFor waits up to 5 s for cond.
func WaitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WantPlainClose dials addr, sends payload and expects the connection to
// be closed without a byte of answer (a hang until the deadline fails too).
func WantPlainClose(t testing.TB, addr, payload string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, payload)
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("want a plain close, got %v after %q", err, b)
	} else if len(b) != 0 {
		t.Errorf("want a plain close, got %q", b)
	}
}

// RawRequest sends raw bytes to addr and returns the parsed response.
func RawRequest(t testing.TB, addr, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", firstLine(raw), err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}

// RunCurl runs the real curl with a clean environment (no proxy
// variables, no .curlrc) and returns its output, standard error and exit
// code.
func RunCurl(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	bin := testutil.NeedTool(t, "curl")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-sS", "--max-time", "10"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	t.Fatalf("curl: %v", err)
	return "", "", -1
}

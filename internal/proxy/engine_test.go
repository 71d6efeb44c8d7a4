package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/squid"
)

// countingOrigin is an httptest origin that counts connections and
// requests.
type countingOrigin struct {
	conns, reqs atomic.Int32
	closed      atomic.Int32
	port        string
}

func newCountingOrigin(t *testing.T, h http.HandlerFunc) *countingOrigin {
	t.Helper()
	o := &countingOrigin{}
	_, o.port = origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.reqs.Add(1)
		h(w, r)
	}), func(hs *http.Server) {
		hs.ConnState = func(c net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				o.conns.Add(1)
			case http.StateClosed:
				o.closed.Add(1)
			}
		}
	})
	return o
}

func pathEcho(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "path "+r.URL.Path) }

var originHosts = map[string]string{"origin.test": "127.0.0.1"}

func TestEngineKeepAliveBothSides(t *testing.T) {
	o := newCountingOrigin(t, pathEcho)
	p := startProxy(t, proxyConf{hosts: originHosts})
	for client := 0; client < 2; client++ {
		c := dialRaw(t, p.Addr)
		for i := 0; i < 5; i++ {
			c.Send("GET http://origin.test:%s/r%d HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port, i)
			resp, body := c.Read("GET")
			if resp.StatusCode != 200 || body != fmt.Sprintf("path /r%d", i) {
				t.Fatalf("client %d request %d: %d %q", client, i, resp.StatusCode, body)
			}
			if resp.Close {
				t.Fatalf("client %d request %d: the proxy closes a keep-alive connection", client, i)
			}
		}
	}
	if n := o.conns.Load(); n != 1 {
		t.Errorf("origin saw %d connections for 10 requests from 2 clients, want 1 (pooled)", n)
	}
	if n := p.tr.Idle(); n != 1 {
		t.Errorf("%d idle origin connections pooled, want 1", n)
	}
}

func TestEnginePipelining(t *testing.T) {
	o := newCountingOrigin(t, pathEcho)
	p := startProxy(t, proxyConf{hosts: originHosts})
	c := dialRaw(t, p.Addr)
	var all strings.Builder
	for i := 0; i < 4; i++ {
		method := "GET"
		if i == 2 {
			method = "HEAD"
		}
		fmt.Fprintf(&all, "%s http://origin.test:%s/p%d HTTP/1.1\r\nHost: origin.test\r\n\r\n", method, o.port, i)
	}
	c.Send("%s", all.String()) // all four in one write
	for i := 0; i < 4; i++ {
		method := "GET"
		if i == 2 {
			method = "HEAD"
		}
		resp, body := c.Read(method)
		want := fmt.Sprintf("path /p%d", i)
		if method == "HEAD" {
			want = ""
		}
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("response %d: %d %q, want %q", i, resp.StatusCode, body, want)
		}
	}
}

func TestEngineHTTP10(t *testing.T) {
	o := newCountingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			io.WriteString(w, "part1,")
			w.(http.Flusher).Flush() // chunked to egret
			io.WriteString(w, "part2")
			return
		}
		pathEcho(w, r)
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	t.Run("close", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		c.Send("GET http://origin.test:%s/a HTTP/1.0\r\n\r\n", o.port)
		resp, body := c.Read("GET")
		if resp.StatusCode != 200 || body != "path /a" {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		if v := resp.Header.Get("Connection"); v != "" {
			t.Errorf("Connection: %q to an HTTP/1.0 client that did not ask for keep-alive", v)
		}
		if !c.Closed() {
			t.Error("connection of an HTTP/1.0 client left open")
		}
	})
	t.Run("keep-alive", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		for i := 0; i < 3; i++ {
			c.Send("GET http://origin.test:%s/k%d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", o.port, i)
			resp, body := c.Read("GET")
			if resp.StatusCode != 200 || body != fmt.Sprintf("path /k%d", i) {
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
			}
			if v := resp.Header.Get("Connection"); !strings.EqualFold(v, "keep-alive") {
				t.Fatalf("request %d: Connection %q, want keep-alive", i, v)
			}
		}
	})
	t.Run("unknown-length", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		c.Send("GET http://origin.test:%s/stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", o.port)
		resp, body := c.Read("GET")
		if body != "part1,part2" || len(resp.TransferEncoding) != 0 {
			t.Fatalf("got %q (transfer encoding %v): an HTTP/1.0 client cannot take chunked", body, resp.TransferEncoding)
		}
		if !c.Closed() {
			t.Error("a body without length to an HTTP/1.0 client must end with the connection")
		}
	})
}

func TestEngineConnectionClose(t *testing.T) {
	o := newCountingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/origin-closes" {
			w.Header().Set("Connection", "close")
		}
		pathEcho(w, r)
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	t.Run("client-closes", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		c.Send("GET http://origin.test:%s/x HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n", o.port)
		resp, _ := c.Read("GET")
		if !resp.Close {
			t.Errorf("response lacks Connection: close (%v)", resp.Header)
		}
		if !c.Closed() {
			t.Error("connection left open after Connection: close")
		}
		waitFor(t, func() bool { return p.tr.Idle() == 1 })
	})
	t.Run("origin-closes", func(t *testing.T) {
		before := o.conns.Load()
		c := dialRaw(t, p.Addr)
		for i := 0; i < 2; i++ {
			c.Send("GET http://origin.test:%s/origin-closes HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
			resp, body := c.Read("GET")
			if resp.StatusCode != 200 || body != "path /origin-closes" || resp.Close {
				t.Fatalf("request %d: %d %q close=%v: the origin's close is hop-by-hop", i, resp.StatusCode, body, resp.Close)
			}
		}
		// The first request may ride the connection pooled by the subtest
		// before; the second cannot ride the one the origin closed.
		if n := o.conns.Load() - before; n < 1 {
			t.Errorf("origin saw %d new connections: a connection the origin closed was reused", n)
		}
	})
}

func TestEngineNoLength(t *testing.T) {
	port := tcpOrigin(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	c := dialRaw(t, p.Addr)
	for i := 0; i < 2; i++ {
		c.Send("GET http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test\r\n\r\n", port)
		resp, body := c.Read("GET")
		if body != "until the end" {
			t.Fatalf("request %d: body %q", i, body)
		}
		if len(resp.TransferEncoding) == 0 || resp.Close {
			t.Errorf("request %d: want a chunked response on a kept connection, got %v close=%v", i, resp.TransferEncoding, resp.Close)
		}
	}
}

func TestEngineBodylessResponses(t *testing.T) {
	o := newCountingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("Content-Length", "1234")
			if r.Method != "HEAD" {
				w.Write(bytes.Repeat([]byte("z"), 1234))
			}
		}
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	c := dialRaw(t, p.Addr)
	for _, tc := range []struct {
		method, path string
		code         int
		cl           string
	}{
		{"HEAD", "/doc", 200, "1234"},
		{"GET", "/204", 204, ""},
		{"GET", "/304", 304, ""},
		{"GET", "/doc", 200, "1234"},
	} {
		c.Send("%s http://origin.test:%s%s HTTP/1.1\r\nHost: origin.test\r\n\r\n", tc.method, o.port, tc.path)
		resp, body := c.Read(tc.method)
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Length") != tc.cl {
			t.Fatalf("%s %s: %d Content-Length %q, want %d %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Length"), tc.code, tc.cl)
		}
		if tc.method == "GET" && tc.code == 200 && len(body) != 1234 {
			t.Fatalf("GET body %d bytes", len(body))
		}
		if tc.code == 304 && resp.Header.Get("ETag") != `"v1"` {
			t.Errorf("304 lost its ETag")
		}
	}
	// The same client connection carried all four: no stray body bytes.
	if n := o.conns.Load(); n != 1 {
		t.Errorf("origin saw %d connections, want 1", n)
	}
}

func TestEngineTrailers(t *testing.T) {
	o := newCountingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Checksum")
		fmt.Fprintf(w, "got %q with trailer %q", b, r.Trailer.Get("X-Req-Sum"))
		w.(http.Flusher).Flush()
		w.Header().Set("X-Checksum", "abc123")
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	req, _ := http.NewRequest("POST", "http://origin.test:"+o.port+"/", io.MultiReader(strings.NewReader("chunk1"), strings.NewReader("chunk2")))
	req.ContentLength = -1 // chunked
	req.Trailer = http.Header{"X-Req-Sum": nil}
	req.Body = &trailerBody{r: req.Body, set: func() { req.Trailer.Set("X-Req-Sum", "s42") }}
	resp, err := p.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `got "chunk1chunk2" with trailer "s42"` {
		t.Errorf("origin answered %q: the request trailer did not arrive", b)
	}
	if v := resp.Trailer.Get("X-Checksum"); v != "abc123" {
		t.Errorf("response trailer X-Checksum = %q (trailers %v)", v, resp.Trailer)
	}
}

// trailerBody sets the request's trailer when its body ends.
type trailerBody struct {
	r   io.ReadCloser
	set func()
}

func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.set()
	}
	return n, err
}

func (b *trailerBody) Close() error { return b.r.Close() }

// TestEngineSmuggling: ambiguous or broken framing is refused with 400 (or
// 501 for a transfer coding egret does not implement) and the connection
// closed, so nothing after it can be taken for a request.
func TestEngineSmuggling(t *testing.T) {
	var complete atomic.Int32
	o := newCountingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err == nil {
			complete.Add(1)
		}
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	head := "POST http://origin.test:" + o.port + "/ HTTP/1.1\r\nHost: origin.test\r\n"
	smuggled := "GET http://origin.test:" + o.port + "/smuggled HTTP/1.1\r\nHost: origin.test\r\n\r\n"
	for _, tc := range []struct {
		name, raw string
		code      int
	}{
		{"te-and-cl", head + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + smuggled, 400},
		{"cl-and-te", head + "Content-Length: 50\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 400},
		{"two-content-lengths", head + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!" + smuggled, 400},
		{"negative-content-length", head + "Content-Length: -5\r\n\r\n" + smuggled, 400},
		{"bad-chunk-size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n" + smuggled, 400},
		{"chunk-size-overflow", head + "Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\nx\r\n0\r\n\r\n" + smuggled, 400},
		{"unsupported-transfer-coding", head + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + smuggled, 501},
		{"two-transfer-encodings", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 501},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, p.Addr)
			c.Send("%s", tc.raw)
			resp, body := c.Read("POST")
			wantProxyStatus(t, resp, body, tc.code, "http_request_error")
			if !c.Closed() {
				t.Error("the connection stayed open after a framing error")
			}
		})
	}
	if n := complete.Load(); n != 0 {
		t.Errorf("the origin received %d complete requests", n)
	}
	if strings.Contains(p.Log.String(), "/smuggled") {
		t.Errorf("a smuggled request was served:\n%s", p.Log.String())
	}
}

func TestEngineHeaderLimits(t *testing.T) {
	p := startProxy(t, proxyConf{hosts: originHosts, timeouts: Timeouts{HeaderRead: 300 * time.Millisecond, ClientIdle: 400 * time.Millisecond}})
	o := newCountingOrigin(t, pathEcho)
	t.Run("oversized-header", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		c.Send("GET http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test\r\nX-Big: %s\r\n\r\n", o.port, strings.Repeat("b", DefaultMaxHeaderBytes+2*http1.HeaderSlack))
		resp, body := c.Read("GET")
		wantProxyStatus(t, resp, body, http.StatusRequestHeaderFieldsTooLarge, "http_request_header_section_size")
		if !c.Closed() {
			t.Error("connection left open after 431")
		}
	})
	t.Run("malformed-credential-line", func(t *testing.T) {
		// A header line Go refuses is quoted in its error; with a
		// credential in it, neither the answer nor the log repeats it.
		c := dialRaw(t, p.Addr)
		c.Send("GET http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test\r\nProxy-Authorization Basic c2VjcmV0LXBhc3M=\r\n\r\n", o.port)
		resp, body := c.Read("GET")
		wantProxyStatus(t, resp, body, http.StatusBadRequest, "http_request_error")
		waitFor(t, func() bool { return strings.Contains(p.Log.String(), "malformed request") })
		for where, text := range map[string]string{"body": body, "Proxy-Status": resp.Header.Get("Proxy-Status"), "log": p.Log.String()} {
			if strings.Contains(text, "c2VjcmV0") {
				t.Errorf("the credential reached the %s: %s", where, text)
			}
		}
	})
	t.Run("silent-client", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		start := time.Now()
		if !c.Closed() {
			t.Fatal("a connection that never sent a byte was kept open")
		}
		if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
			t.Errorf("silent connection closed after %v, want about the 300ms header timeout", d)
		}
	})
	t.Run("slow-second-header", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		c.Send("GET http://origin.test:%s/one HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
		if resp, _ := c.Read("GET"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		c.Send("GET http://origin.test:%s/two HTTP/1.1\r\n", o.port) // and nothing more
		start := time.Now()
		if !c.Closed() {
			t.Fatal("a half-sent header kept the connection open")
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("closed after %v; want about the 300ms header timeout", d)
		}
	})
	t.Run("client-idle", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		c.Send("GET http://origin.test:%s/one HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
		c.Read("GET")
		start := time.Now()
		if !c.Closed() {
			t.Fatal("an idle keep-alive connection was kept past the idle timeout")
		}
		if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
			t.Errorf("idle connection closed after %v, want about 400ms", d)
		}
	})
}

func TestEngineClientGoneMidResponse(t *testing.T) {
	aborted := make(chan struct{}, 1)
	o := newCountingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			pathEcho(w, r)
			return
		}
		chunk := bytes.Repeat([]byte("s"), 32<<10)
		for i := 0; i < 1000; i++ {
			if _, err := w.Write(chunk); err != nil {
				aborted <- struct{}{}
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond)
		}
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	c := dialRaw(t, p.Addr)
	c.Send("GET http://origin.test:%s/stream HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
	resp, err := http.ReadResponse(c.BR, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	io.ReadFull(resp.Body, make([]byte, 100<<10))
	c.C.Close()
	select {
	case <-aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("the origin kept streaming to a client that left")
	}
	line := waitLogLine(t, p, "/stream")
	if line["error"] != "connection_terminated" || line["status"] != float64(200) {
		t.Errorf("log line %v: want status 200, error connection_terminated", line)
	}
	// Still serving.
	c2 := dialRaw(t, p.Addr)
	c2.Send("GET http://origin.test:%s/after HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
	if resp, body := c2.Read("GET"); resp.StatusCode != 200 || body != "path /after" {
		t.Errorf("after: %d %q", resp.StatusCode, body)
	}
}

func TestEngineOriginGoneMidResponse(t *testing.T) {
	for _, tc := range []struct{ name, partial string }{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly ten b"},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nonly ten b\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := tcpOrigin(t, func(c net.Conn) {
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				io.WriteString(c, tc.partial)
				time.Sleep(50 * time.Millisecond)
			})
			p := startProxy(t, proxyConf{hosts: originHosts})
			c := dialRaw(t, p.Addr)
			c.Send("GET http://origin.test:%s/partial HTTP/1.1\r\nHost: origin.test\r\n\r\n", port)
			resp, err := http.ReadResponse(c.BR, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %v", resp, err)
			}
			b, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Errorf("the client read %q as a complete body", b)
			}
			if string(b) != "only ten b" {
				t.Errorf("body so far %q", b)
			}
			if !c.Closed() {
				t.Error("connection not aborted")
			}
			line := waitLogLine(t, p, "/partial")
			if line["error"] != "http_response_incomplete" {
				t.Errorf("log line %v", line)
			}
		})
	}
}

// TestEngineExpectContinueSilentOrigin: an origin that ignores
// Expect: 100-continue (it waits for the body) still gets it: egret tells
// the client to go ahead after a second.
func TestEngineExpectContinueSilentOrigin(t *testing.T) {
	port := tcpOrigin(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(req.Body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b)+4, "got "+string(b))
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	c := dialRaw(t, p.Addr)
	start := time.Now()
	c.Send("PUT http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", port)
	resp, _ := c.Read("PUT")
	if resp.StatusCode != http.StatusContinue {
		t.Fatalf("first answer %d, want 100", resp.StatusCode)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("100 Continue after %v: the origin never sent one, so egret should have waited for it", d)
	}
	c.Send("hello")
	resp, body := c.Read("PUT")
	if resp.StatusCode != 200 || body != "got hello" {
		t.Errorf("got %d %q", resp.StatusCode, body)
	}
}

// TestEngineWebSocket runs a real WebSocket echo server (x/net/websocket)
// behind egret; the client (x/net/websocket too) sends its handshake in
// absolute form, as to a forward proxy.
func TestEngineWebSocket(t *testing.T) {
	srv := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p := startProxy(t, proxyConf{hosts: originHosts})
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	cfg, err := websocket.NewConfig("ws://origin.test:"+port+"/echo", "http://origin.test/")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.NewClient(cfg, &absoluteForm{Conn: c, prefix: "http://origin.test:" + port})
	if err != nil {
		t.Fatalf("websocket handshake through egret: %v", err)
	}
	for _, msg := range []string{"hello", strings.Repeat("big", 10000)} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		// The echo may come back in several frames.
		var got string
		for len(got) < len(msg) {
			var part string
			if err := websocket.Message.Receive(ws, &part); err != nil {
				t.Fatalf("echo of %d bytes: %v after %d", len(msg), err, len(got))
			}
			got += part
		}
		if got != msg {
			t.Fatalf("echo of %d bytes differs", len(msg))
		}
	}
	if n := p.OpenTunnels(); n != 1 {
		t.Errorf("open tunnels = %d, want the upgraded connection", n)
	}
	ws.Close()
	waitFor(t, func() bool { return p.OpenTunnels() == 0 })
	line := waitLogLine(t, p, "/echo")
	if line["status"] != float64(101) || line["bytes_up"].(float64) < 30000 {
		t.Errorf("log line %v", line)
	}
}

// absoluteForm rewrites the request line of the first write to absolute
// form, as a client of a forward proxy sends it.
type absoluteForm struct {
	net.Conn
	prefix string
	done   bool
}

func (a *absoluteForm) Write(p []byte) (int, error) {
	if a.done {
		return a.Conn.Write(p)
	}
	a.done = true
	method, rest, _ := bytes.Cut(p, []byte(" "))
	out := append(append(append([]byte{}, method...), ' '), a.prefix...)
	if _, err := a.Conn.Write(append(out, rest...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// TestEngineRetriesDeadPooledConn: an origin that closes each connection
// right after its answer (without saying so) leaves dead connections in
// the pool; requests that find one are sent again on a new connection
// (idempotent ones after the failure, others after a check before reuse).
func TestEngineRetriesDeadPooledConn(t *testing.T) {
	var conns atomic.Int32
	port := tcpOrigin(t, func(c net.Conn) {
		conns.Add(1)
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	c := dialRaw(t, p.Addr)
	for i, method := range []string{"GET", "GET", "POST", "GET", "POST"} {
		if method == "POST" {
			c.Send("POST http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 4\r\n\r\nbody", port)
		} else {
			c.Send("GET http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test\r\n\r\n", port)
		}
		resp, body := c.Read(method)
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d (%s): %d %q", i, method, resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond) // let the origin's close arrive
	}
	if n := conns.Load(); n != 5 {
		t.Errorf("origin saw %d connections for 5 requests", n)
	}
}

// TestEngineRetireOnSetState: a new state (routes, pools or credentials
// changed) closes the idle origin connections; the next request makes a
// new one.
func TestEngineRetireOnSetState(t *testing.T) {
	o := newCountingOrigin(t, pathEcho)
	p := startProxy(t, proxyConf{hosts: originHosts})
	c := dialRaw(t, p.Addr)
	get := func() {
		c.Send("GET http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
		if resp, _ := c.Read("GET"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	}
	get()
	get()
	if o.conns.Load() != 1 {
		t.Fatalf("%d origin connections before the change", o.conns.Load())
	}
	if err := p.SetState(p.State()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return o.closed.Load() == 1 })
	get()
	if n := o.conns.Load(); n != 2 {
		t.Errorf("%d origin connections: the retired one was reused", n)
	}
}

// TestEngineHTTPSOrigin: https:// URLs are forwarded over TLS to the
// origin, directly (the connection pooled) and through Squid's CONNECT.
func TestEngineHTTPSOrigin(t *testing.T) {
	cert, _ := testutil.SelfSigned(t, "", "origin.test", "partner.test")
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %s %s", r.TLS.ServerName, r.URL.Path)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	roots := x509.NewCertPool()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots.AddCert(leaf)
	sq := squid.Start(t, squid.Options{Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	p := startProxyWith(t, proxyConf{hosts: originHosts, members: []string{"http://" + sq.Addr},
		rules: directRule("origin.test")}, func(o *Options) { o.OriginTLS = &tls.Config{RootCAs: roots} })
	c := dialRaw(t, p.Addr)
	for i := 0; i < 3; i++ {
		c.Send("GET https://origin.test:%s/d%d HTTP/1.1\r\nHost: origin.test\r\n\r\n", port, i)
		resp, body := c.Read("GET")
		if resp.StatusCode != 200 || body != fmt.Sprintf("tls origin.test /d%d", i) {
			t.Fatalf("direct %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d TLS connections for 3 direct requests, want 1", n)
	}
	for i := 0; i < 2; i++ {
		c.Send("GET https://partner.test:%s/u%d HTTP/1.1\r\nHost: partner.test\r\n\r\n", port, i)
		resp, body := c.Read("GET")
		if resp.StatusCode != 200 || body != fmt.Sprintf("tls partner.test /u%d", i) {
			t.Fatalf("through squid %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d TLS connections after 2 requests through squid, want 1 more (the tunnel pooled)", n)
	}
	p.RetireConnections() // Squid logs a tunnel when it ends
	sq.WaitLog(t, "CONNECT partner.test:"+port)
	c.Send("GET https://origin.test:%s/ HTTP/1.1\r\nHost: x\r\n\r\n", srvPortOther(t))
	resp, body := c.Read("GET")
	wantProxyStatus(t, resp, body, http.StatusBadGateway, "tls_certificate_error")
}

// srvPortOther is a TLS server whose certificate egret does not trust.
func srvPortOther(t *testing.T) string {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return port
}

// TestEngineMemberAbsoluteForm: through an http member, plain-HTTP
// requests go in absolute form with the member's credential and egret's
// Via, hop-by-hop fields stripped, over one kept connection.
func TestEngineMemberAbsoluteForm(t *testing.T) {
	var conns atomic.Int32
	seen := make(chan string, 16)
	member := tcpOrigin(t, func(c net.Conn) {
		conns.Add(1)
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			seen <- fmt.Sprintf("%s %s auth=%s via=%s conn=%s te=%s", req.Method, req.RequestURI, req.Header.Get("Proxy-Authorization"),
				req.Header.Get("Via"), req.Header.Get("Connection"), req.Header.Get("X-Hop"))
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nmember")
		}
	})
	p := startProxy(t, proxyConf{members: []string{"http://u:p%40ss@127.0.0.1:" + member}})
	c := dialRaw(t, p.Addr)
	for i := 0; i < 3; i++ {
		c.Send("GET http://partner.test/m%d?q=1 HTTP/1.1\r\nHost: partner.test\r\nConnection: X-Hop\r\nX-Hop: secret\r\nProxy-Authorization: Basic Y2xpZW50\r\n\r\n", i)
		resp, body := c.Read("GET")
		if resp.StatusCode != 200 || body != "member" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		want := fmt.Sprintf("GET http://partner.test/m%d?q=1 auth=Basic dTpwQHNz via=1.1 egret-test (egret) conn= te=", i)
		if got := <-seen; got != want {
			t.Errorf("member saw %q\nwant        %q", got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("member saw %d connections, want 1", n)
	}
}

// TestEngineShutdown: Shutdown closes idle keep-alive connections at once,
// lets a request in flight finish (then closes its connection), and
// returns cleanly.
func TestEngineShutdown(t *testing.T) {
	release := make(chan struct{})
	o := newCountingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		pathEcho(w, r)
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	idle := dialRaw(t, p.Addr)
	idle.Send("GET http://origin.test:%s/idle HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
	idle.Read("GET")
	busy := dialRaw(t, p.Addr)
	busy.Send("GET http://origin.test:%s/slow HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
	waitFor(t, func() bool { return o.reqs.Load() == 2 })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- p.Shutdown(ctx)
	}()
	if !idle.Closed() {
		t.Error("an idle keep-alive connection was not closed by Shutdown")
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	resp, body := busy.Read("GET")
	if resp.StatusCode != 200 || body != "path /slow" || !resp.Close {
		t.Errorf("request in flight: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if !busy.Closed() {
		t.Error("connection kept open during shutdown")
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// waitLogLine waits for the access log line of the request whose URL
// ends with path.
func waitLogLine(t *testing.T, p *testProxy, path string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, l := range strings.Split(p.Log.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "request" {
				continue
			}
			if u, _ := m["url"].(string); strings.HasSuffix(u, path) {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log line for %s in:\n%s", path, p.Log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// directRule routes host (and its subdomains) direct.
func directRule(host string) []route.Rule {
	return []route.Rule{{Match: route.Match{Suffixes: []route.Suffix{{Domain: host, Apex: true}}}, Action: route.Direct, Source: "test"}}
}

// TestEngineConnectionNamesFraming: a Connection token that names a
// framing field (issue 11: request smuggling through Connection) changes
// neither the request egret sends nor the response it passes on. The
// origin is a real net/http server on a pooled connection: the attacker's
// body stays a body, and the next client's request is its own.
func TestEngineConnectionNamesFraming(t *testing.T) {
	type seen struct{ path, body string }
	got := make(chan seen, 16)
	o := newCountingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.URL.Path, string(b)}
		if r.URL.Path == "/resp" {
			// A response that names its own length hop-by-hop, with a
			// fake second response in its body.
			w.Header().Set("Connection", "Content-Length")
			body := "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfake"
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			io.WriteString(w, body)
			return
		}
		io.WriteString(w, "answer "+r.URL.Path)
	})
	p := startProxy(t, proxyConf{hosts: originHosts})
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: origin.test\r\n\r\n"
	for _, conn := range []string{"Content-Length", "keep-alive, content-length", "CONTENT-LENGTH", "Host, Content-Length, Transfer-Encoding"} {
		t.Run(strings.ReplaceAll(strings.ToLower(conn), ", ", "-"), func(t *testing.T) {
			a := dialRaw(t, p.Addr)
			a.Send("POST http://origin.test:%s/attack HTTP/1.1\r\nHost: origin.test\r\nConnection: %s\r\nContent-Length: %d\r\n\r\n%s", o.port, conn, len(smuggled), smuggled)
			resp, body := a.Read("POST")
			if resp.StatusCode != 200 || body != "answer /attack" {
				t.Fatalf("attacker: %d %q", resp.StatusCode, body)
			}
			if s := <-got; s.path != "/attack" || s.body != smuggled {
				t.Fatalf("origin got %q with body %q, want /attack with the smuggled text as its body", s.path, s.body)
			}
			v := dialRaw(t, p.Addr)
			v.Send("GET http://origin.test:%s/victim HTTP/1.1\r\nHost: origin.test\r\nAuthorization: secret\r\n\r\n", o.port)
			resp, body = v.Read("GET")
			if resp.StatusCode != 200 || body != "answer /victim" {
				t.Fatalf("victim: %d %q", resp.StatusCode, body)
			}
			if s := <-got; s.path != "/victim" {
				t.Fatalf("origin's next request is %q, want /victim", s.path)
			}
		})
	}
	t.Run("response", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		c.Send("GET http://origin.test:%s/resp HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
		resp, body := c.Read("GET")
		if resp.ContentLength < 0 || !strings.HasSuffix(body, "fake") {
			t.Fatalf("response unframed or cut: length %d, body %q", resp.ContentLength, body)
		}
		<-got
		c.Send("GET http://origin.test:%s/next HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
		resp, body = c.Read("GET")
		if body != "answer /next" {
			t.Fatalf("the next answer on the connection is %q, want the origin's own", body)
		}
		<-got
	})
	if strings.Contains(p.Log.String(), "/smuggled") {
		t.Errorf("a smuggled request was logged:\n%s", p.Log.String())
	}
}

// TestEngineStalledClients: a client that stops sending its body, or stops
// reading a long answer, is cut off after the client idle timeout; what
// it held (the origin connection, the goroutines) is let go (issue 11).
func TestEngineStalledClients(t *testing.T) {
	big := strings.Repeat("x", 32<<20)
	o := newCountingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		io.ReadAll(r.Body)
	})
	p := startProxy(t, proxyConf{hosts: originHosts, timeouts: Timeouts{ClientIdle: 300 * time.Millisecond}})
	t.Run("body", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		start := time.Now()
		c.Send("POST http://origin.test:%s/upload HTTP/1.1\r\nHost: origin.test\r\nContent-Length: 100000\r\n\r\n%s", o.port, strings.Repeat("y", 40000))
		resp, body := c.Read("POST")
		wantProxyStatus(t, resp, body, http.StatusRequestTimeout, "http_request_error")
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the stalled body was cut after %v", d)
		}
		if !c.Closed() {
			t.Error("the connection stayed open")
		}
	})
	t.Run("response", func(t *testing.T) {
		c := dialRaw(t, p.Addr)
		c.Send("GET http://origin.test:%s/big HTTP/1.1\r\nHost: origin.test\r\n\r\n", o.port)
		// Read nothing: the answer fills the socket buffers and stops.
		waitFor(t, func() bool { return strings.Contains(p.Log.String(), `"url":"http://origin.test:`+o.port+`/big"`) })
		if !strings.Contains(p.Log.String(), "client went away") {
			t.Errorf("the stalled reader was not cut off:\n%s", p.Log.String())
		}
	})
}

package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"egret.io/egret/internal/route"
)

func TestForwardDirect(t *testing.T) {
	var conns atomic.Int32
	var seen atomic.Value
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Clone())
		w.Header().Set("X-Origin", "yes")
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}), func(hs *http.Server) {
		hs.ConnState = func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
	})
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}})
	cl := p.client()
	for i := 0; i < 10; i++ {
		req, _ := http.NewRequest("GET", "http://origin.test:"+port+"/a?token=secret", nil)
		req.Header.Set("Connection", "X-Hop")
		req.Header.Set("X-Hop", "must-not-pass")
		req.Header.Set("Keep-Alive", "timeout=5")
		req.Header.Set("X-Forwarded-For", "10.0.0.1")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "hello /a" {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		if v := resp.Header.Get("Via"); v != "1.1 egret-test (egret)" {
			t.Errorf("response Via = %q", v)
		}
	}
	h := seen.Load().(http.Header)
	for _, hop := range []string{"X-Hop", "Keep-Alive", "Proxy-Connection", "Connection"} {
		if v := h.Get(hop); v != "" {
			t.Errorf("origin saw hop-by-hop header %s: %q", hop, v)
		}
	}
	if v := h.Get("Via"); v != "1.1 egret-test (egret)" {
		t.Errorf("origin saw Via %q", v)
	}
	if v := h.Get("X-Forwarded-For"); v != "10.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client's own value passed through untouched", v)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("origin saw %d connections for 10 keep-alive requests, want 1", n)
	}
	log := p.Log.String()
	if strings.Contains(log, "secret") {
		t.Errorf("the query string reached the log:\n%s", log)
	}
	for _, want := range []string{`"msg":"request"`, `"route":"direct"`, `"reason":"default"`, `"status":200`, `"dest":"origin.test:` + port + `"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
}

func TestForwardStreamsChunkedBothWays(t *testing.T) {
	release := make(chan struct{})
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) == 0 || r.TransferEncoding[0] != "chunked" {
			http.Error(w, "want a chunked request", 400)
			return
		}
		// Echo the request body back, line by line, flushing each.
		http.NewResponseController(w).EnableFullDuplex()
		br := bufio.NewReader(r.Body)
		line, _ := br.ReadString('\n')
		fmt.Fprint(w, "first:"+line)
		w.(http.Flusher).Flush()
		<-release
		rest, _ := io.ReadAll(br)
		fmt.Fprintf(w, "rest:%s", rest)
	}))
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}})
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", "http://origin.test:"+port+"/", pr)
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := p.client().Do(req)
		if err != nil {
			t.Error(err)
			done <- nil
			return
		}
		done <- resp
	}()
	io.WriteString(pw, "one\n")
	resp := <-done
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	if resp.ContentLength != -1 {
		t.Errorf("response ContentLength = %d, want chunked (-1)", resp.ContentLength)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "first:one\n" {
		t.Fatalf("first chunk = %q, %v: the response was not streamed", first, err)
	}
	io.WriteString(pw, "two")
	pw.Close()
	close(release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "rest:two" {
		t.Errorf("rest = %q", rest)
	}
}

func TestForwardExpectContinue(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Reject") != "" {
			http.Error(w, "no thanks", http.StatusExpectationFailed)
			return
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "got %s", b)
	}))
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}})
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "PUT http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test:%s\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("first line = %q, %v; want 100 Continue before the body is sent", line, err)
	}
	for {
		l, _ := br.ReadString('\n')
		if l == "\r\n" || l == "" {
			break
		}
	}
	io.WriteString(c, "hello")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "got hello" {
		t.Errorf("got %d %q", resp.StatusCode, b)
	}
	// An origin that refuses without reading: the client gets the refusal
	// and never has to send the body.
	fmt.Fprintf(c, "PUT http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test:%s\r\nContent-Length: 5\r\nExpect: 100-continue\r\nX-Reject: 1\r\n\r\n", port, port)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusExpectationFailed {
		t.Errorf("status = %d, want 417 straight from the origin", resp.StatusCode)
	}
}

func TestForwardUpgrade(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
			http.Error(w, "want an upgrade", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		buf := make([]byte, 5)
		io.ReadFull(brw, buf)
		c.Write([]byte(strings.ToUpper(string(buf))))
	}))
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}})
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://origin.test:%s/ws HTTP/1.1\r\nHost: origin.test:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 {
		t.Fatalf("status = %d, want 101", resp.StatusCode)
	}
	io.WriteString(c, "hello")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "HELLO" {
		t.Errorf("upgraded stream gave %q, %v", buf, err)
	}
}

func TestForwardErrors(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	p := startProxy(t, proxyConf{
		hosts: map[string]string{"origin.test": "127.0.0.1", "closed.test": "127.0.0.1", "denied.test": "127.0.0.1"},
		rules: []route.Rule{{Match: route.Match{Suffixes: []route.Suffix{{Domain: "denied.test", Apex: true}}}, Action: route.Deny, Source: "test"}},
	})
	tests := []struct {
		name, raw string
		code      int
		errType   string
	}{
		{"deny", fmt.Sprintf("GET http://denied.test:%s/ HTTP/1.1\r\nHost: denied.test\r\n\r\n", port), 403, "http_request_denied"},
		{"deny-connect", fmt.Sprintf("CONNECT api.denied.test:%s HTTP/1.1\r\nHost: x\r\n\r\n", port), 403, "http_request_denied"},
		{"refused", fmt.Sprintf("GET http://closed.test:%d/ HTTP/1.1\r\nHost: closed.test\r\n\r\n", closedPort), 502, "connection_refused"},
		{"refused-connect", fmt.Sprintf("CONNECT closed.test:%d HTTP/1.1\r\nHost: x\r\n\r\n", closedPort), 502, "connection_refused"},
		{"no-such-host", "GET http://nowhere.test/ HTTP/1.1\r\nHost: nowhere.test\r\n\r\n", 502, "destination_not_found"},
		{"no-such-host-connect", "CONNECT nowhere.test:443 HTTP/1.1\r\nHost: x\r\n\r\n", 502, "destination_not_found"},
		{"connect-no-port", "CONNECT origin.test HTTP/1.1\r\nHost: origin.test\r\n\r\n", 400, "http_request_error"},
		{"connect-bad-host", "CONNECT bad!host.test:443 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "http_request_error"},
		{"connect-port-zero", "CONNECT origin.test:0 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "http_request_error"},
		{"origin-form", "GET / HTTP/1.1\r\nHost: origin.test\r\n\r\n", 400, "http_request_error"},
		{"bad-scheme", "GET ftp://origin.test/x HTTP/1.1\r\nHost: origin.test\r\n\r\n", 400, "http_request_error"},
		{"loop", fmt.Sprintf("GET http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test\r\nVia: 1.1 other, 1.1 egret-test (egret)\r\n\r\n", port), 508, "proxy_loop_detected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawRequest(t, p.Addr, tc.raw)
			wantProxyStatus(t, resp, body, tc.code, tc.errType)
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("origin saw %d requests; denied and failed requests must never reach it", n)
	}
}

func TestBadInput(t *testing.T) {
	p := startProxy(t, proxyConf{timeouts: Timeouts{HeaderRead: 300 * time.Millisecond}})
	t.Run("malformed-request-line", func(t *testing.T) {
		resp, _ := rawRequest(t, p.Addr, "GARBAGE\r\n\r\n")
		if resp.StatusCode != 400 {
			t.Errorf("status = %d, want 400", resp.StatusCode)
		}
	})
	t.Run("oversized-header", func(t *testing.T) {
		resp, _ := rawRequest(t, p.Addr, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-Big: "+strings.Repeat("a", 200<<10)+"\r\n\r\n")
		if resp.StatusCode != 431 {
			t.Errorf("status = %d, want 431", resp.StatusCode)
		}
	})
	t.Run("absurd-content-length", func(t *testing.T) {
		resp, _ := rawRequest(t, p.Addr, "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 99999999999999999999999\r\n\r\n")
		if resp.StatusCode != 400 {
			t.Errorf("status = %d, want 400", resp.StatusCode)
		}
	})
	t.Run("slowloris", func(t *testing.T) {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n")
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(c)
		if err != nil {
			t.Fatalf("the proxy kept a half-sent request open: %v", err)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("closed after %v, want about the 300ms header timeout", d)
		}
	})
	// The proxy still serves after all that.
	resp, body := rawRequest(t, p.Addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	wantProxyStatus(t, resp, body, 400, "http_request_error")
}

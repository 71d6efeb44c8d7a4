package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzRequest throws arbitrary bytes at the proxy listener. Whatever
// arrives, egret must not panic, must answer with well-formed HTTP or close
// the connection, must mark every error it makes itself with Proxy-Status,
// and must keep serving.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		"GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\n\r\n",
		"CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\n\r\n",
		"CONNECT [::1]:0 HTTP/1.1\r\n\r\n",
		"CONNECT :443 HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"POST http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nContent-Length: -1\r\n\r\n",
		"GET http://[::1%25x]/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://a..b/ HTTP/1.1\r\nHost: a\r\nVia: ,,, 1.1\r\n\r\n",
		"GET http://origin.test:99999/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET ws://origin.test/ HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
		"\x16\x03\x01\x00\x05hello",
		// Framing and smuggling.
		"POST http://origin.test/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		"POST http://origin.test/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"POST http://origin.test/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"POST http://origin.test/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"POST http://origin.test/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
		"PUT http://origin.test/ HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello",
		"PUT http://origin.test/ HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: teapot\r\n\r\nhello",
		// Versions, keep-alive and pipelining.
		"GET http://origin.test/ HTTP/1.0\r\n\r\n",
		"GET http://origin.test/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET http://origin.test/ HTTP/1.0\r\n\r\n",
		"GET http://origin.test/a HTTP/1.1\r\nHost: a\r\n\r\nHEAD http://origin.test/b HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"\r\n\r\nGET http://origin.test/ HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
		"GET http://origin.test/ HTTP/1.1\r\n\r\n",
		"GET http://origin.test/ HTTP/1.1\r\nHost: a b\r\n\r\n",
		"GET http://origin.test/ HTTP/1.1\r\nHost: a\r\n  folded\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET http://origin.test/ HTTP/2.0\r\nHost: a\r\n\r\n",
		"GET https://origin.test/ HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, X-Drop\r\nUpgrade: \x01\r\nX-Drop: 1\r\n\r\n",
		"CONNECT origin.test:80 HTTP/1.1\r\nHost: a\r\nVia: 1.1 egret-test (egret)\r\n\r\n",
	} {
		f.Add(s)
	}
	p := startProxyF(f)
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(c, raw)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		// Every answer (several for pipelined requests) is well-formed,
		// and every error egret makes carries Proxy-Status: nothing
		// listens on origin.test's ports, so every error is egret's.
		br := bufio.NewReader(c)
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 400 && resp.Header.Get("Proxy-Status") == "" {
				t.Fatalf("status %d without Proxy-Status for %q", resp.StatusCode, raw)
			}
		}
		if strings.Contains(p.Log.String(), "panic") {
			t.Fatalf("the proxy panicked on %q:\n%s", raw, p.Log.String())
		}
	})
}

// startProxyF is startProxy for a fuzz target: origin.test resolves to a
// loopback port where nothing listens, so nothing is really forwarded.
func startProxyF(f *testing.F) *testProxy {
	return startProxy(f, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}, timeouts: Timeouts{HeaderRead: time.Second, Dial: 200 * time.Millisecond}})
}

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
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 400 && resp.StatusCode != 400 && resp.StatusCode != 431 && resp.StatusCode != 501 && resp.StatusCode != 505 && resp.Header.Get("Proxy-Status") == "" {
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

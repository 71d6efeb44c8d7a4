package proxyd

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	xproxy "golang.org/x/net/proxy"
)

// tokenMember is an upstream proxy that records the Proxy-Authorization
// of every request and CONNECT it gets, and answers 502.
type tokenMember struct {
	addr string
	mu   sync.Mutex
	auth []string
}

func newTokenMember(t *testing.T) *tokenMember {
	t.Helper()
	m := &tokenMember{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.auth = append(m.auth, r.Method+" "+r.Header.Get("Proxy-Authorization"))
		m.mu.Unlock()
		w.WriteHeader(http.StatusBadGateway)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	m.addr = ln.Addr().String()
	return m
}

func (m *tokenMember) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.auth...)
}

// TestTokenOnlyToGateway (issue 21, finding 8): a sidecar with
// EGRET_UPSTREAM_TOKEN_FILE sends the pod's token only to the gateway it
// was injected for (the default pool, UPSTREAM_PROXY), and in clear only
// to a host on the cluster's network — never to a member of another pool,
// nor over http:// to a public name (TestTokenTarget: the test cannot
// give a member a public address). On the explicit listener (GET and
// CONNECT) and SOCKS5.
func TestTokenOnlyToGateway(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("the-pods-token\n"), 0o600)
	gw, corp := newTokenMember(t), newTokenMember(t)

	send := func(t *testing.T, e *egret, host string) {
		t.Helper()
		for _, kind := range []string{"GET", "CONNECT", "SOCKS5"} {
			c, err := net.DialTimeout("tcp", e.Proxy, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			switch kind {
			case "GET":
				fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host, host)
			case "CONNECT":
				fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", host, host)
			case "SOCKS5":
				c.Close()
				d, err := xproxy.SOCKS5("tcp", e.SOCKS, nil, &net.Dialer{Timeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if sc, err := d.Dial("tcp", host+":443"); err == nil {
					sc.Close()
				}
				continue
			}
			buf := make([]byte, 512)
			c.Read(buf)
			c.Close()
		}
	}
	check := func(t *testing.T, m *tokenMember, what string, want bool) {
		t.Helper()
		got := m.seen()
		if len(got) == 0 {
			t.Fatalf("%s: reached by nothing", what)
		}
		for _, s := range got {
			if strings.Contains(s, "the-pods-token") != want {
				t.Errorf("%s received %q (token wanted: %v)", what, s, want)
			}
		}
	}

	t.Run("gateway-and-another-pool", func(t *testing.T) {
		e := runEgret(t, map[string]string{"UPSTREAM_PROXY": "http://" + gw.addr, "EGRET_UPSTREAM_TOKEN_FILE": tokenFile, "SOCKS_LISTEN_ADDR": "127.0.0.1:0"}, `
pools:
  corp: {members: ["http://`+corp.addr+`"]}
routes:
  - {suffixes: [.corp.test], action: "upstream:corp"}
`, nil)
		send(t, e, "api.example")
		send(t, e, "app.corp.test")
		check(t, gw, "the gateway (default pool, loopback)", true)
		check(t, corp, "a member of another pool", false)
		if strings.Contains(e.Log.String(), "the-pods-token") {
			t.Error("the token reached the log")
		}
	})
}

// TestTokenTarget is where a sidecar's token may go in clear or not.
func TestTokenTarget(t *testing.T) {
	for raw, want := range map[string]bool{
		"http://egret-gateway.egret-system.svc:3128":               true,
		"http://egret-gateway.egret-system.svc.cluster.local:3128": true,
		"https://proxy.example.com:443":                            true,
		"http://10.96.0.10:3128":                                   true,
		"http://[fd00::10]:3128":                                   true,
		"http://100.64.1.1:3128":                                   true,
		"http://127.0.0.1:3128":                                    true,
		"http://proxy.example.com:3128":                            false,
		"http://203.0.113.7:3128":                                  false,
		"socks5://10.0.0.1:1080":                                   false,
		"http://svc.example.com:3128":                              false,
	} {
		u, _ := url.Parse(raw)
		if got := TokenTarget(u); got != want {
			t.Errorf("%s: %v, want %v", raw, got, want)
		}
	}
}

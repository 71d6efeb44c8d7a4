package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kdc"
	"egret.io/egret/internal/testutil/proxytest"
	"egret.io/egret/internal/testutil/squid"
)

// Members that authenticate a connection (NTLM, Negotiate), with a real
// Squid that requires the scheme and curl or raw clients in front of egret.

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Squid (and a KDC)")
	}
}

// authOrigin answers "<method> <path> <body>" and counts requests and
// HEADs.
func authOrigin(t *testing.T) (port string, hits, heads *atomic.Int32) {
	hits, heads = &atomic.Int32{}, &atomic.Int32{}
	_, port = origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Method == http.MethodHead {
			heads.Add(1)
		}
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b))
	}))
	return port, hits, heads
}

func countLog(sq *squid.Squid, substr string) int {
	return strings.Count(strings.Join(sq.AccessLog(), "\n"), substr)
}

func TestNTLMUpstream(t *testing.T) {
	skipShort(t)
	port, hits, heads := authOrigin(t)
	tport := tcpOrigin(t, func(c net.Conn) { io.WriteString(c, "banner\n") })
	sq := squid.Start(t, squid.Options{Auth: squid.AuthNTLM, Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	p := startProxy(t, proxyConf{members: []string{"http://CORP%5Calice:alice-pw@" + sq.Addr + " auth=ntlm"}})
	base := "http://partner.test:" + port

	t.Run("curl-two-requests-one-handshake", func(t *testing.T) {
		out, errOut, code := runCurl(t, "-x", "http://"+p.Addr, base+"/a", base+"/b")
		if code != 0 || out != "GET /a GET /b " {
			t.Fatalf("curl exit %d: %q %s", code, out, errOut)
		}
		sq.WaitLog(t, "GET "+base+`/b CORP\\alice`)
		if n := countLog(sq, "TCP_DENIED/407"); n != 1 {
			t.Errorf("%d NTLM challenges for one client connection, want 1", n)
		}
	})
	t.Run("curl-post-body-sent-once", func(t *testing.T) {
		before := hits.Load()
		out, errOut, code := runCurl(t, "-x", "http://"+p.Addr, "--data-binary", "payload-1", base+"/post")
		if code != 0 || out != "POST /post payload-1" {
			t.Fatalf("curl exit %d: %q %s", code, out, errOut)
		}
		sq.WaitLog(t, "POST "+base+`/post CORP\\alice`)
		if hits.Load()-before != 1 {
			t.Errorf("the origin got %d requests for one POST", hits.Load()-before)
		}
	})
	t.Run("curl-connect", func(t *testing.T) {
		_, br, resp := connect(t, p.Addr, "partner.test:"+tport, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		if line, _ := br.ReadString('\n'); line != "banner\n" {
			t.Fatalf("tunnel gave %q", line)
		}
		code, body, err := proxytest.Curl(t, p.Addr, base+"/tunnelled", true)
		if err != nil || code != "200" || body != "GET /tunnelled " {
			t.Fatalf("curl -p: %s %q %v", code, body, err)
		}
		sq.WaitLog(t, "CONNECT partner.test:"+port+` CORP\\alice`)
	})
	t.Run("connections-are-the-clients-own", func(t *testing.T) {
		// Client A's authenticated connection idles in the pool; client
		// B's request must not ride it: a second handshake. A's next
		// request does ride it: no third.
		before := countLog(sq, "TCP_DENIED/407")
		a, b := dialRaw(t, p.Addr), dialRaw(t, p.Addr)
		get := func(c *rawClient, path string) {
			t.Helper()
			c.Send("GET %s/%s HTTP/1.1\r\nHost: partner.test\r\n\r\n", base, path)
			resp, body := c.Read("GET")
			if resp.StatusCode != 200 || body != "GET /"+path+" " {
				t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
			}
		}
		get(a, "a1")
		get(b, "b1")
		get(a, "a2")
		sq.WaitLog(t, "GET "+base+`/a2 CORP\\alice`)
		if n := countLog(sq, "TCP_DENIED/407") - before; n != 2 {
			t.Errorf("%d handshakes for two clients, want 2 (one each)", n)
		}
		if n := p.tr.Idle(); n != 2 {
			t.Errorf("%d idle member connections, want one per client", n)
		}
		a.C.Close()
		b.C.Close()
		// Their connections end with them.
		waitFor(t, func() bool { return p.tr.Idle() == 0 })
	})
	if heads.Load() != 0 {
		t.Errorf("the origin saw %d HEADs: the NTLM negotiate round went past Squid", heads.Load())
	}
	if strings.Contains(p.Log.String(), "alice-pw") {
		t.Error("the password reached the log")
	}
}

func TestNegotiateUpstream(t *testing.T) {
	skipShort(t)
	k := kdc.Start(t, kdc.Options{})
	k.AddUser(t, "alice", "alice-pw")
	kt := k.AddKeytab(t, "HTTP/127.0.0.1")
	sq := squid.Start(t, squid.Options{Auth: squid.AuthNegotiate, Keytab: kt, Env: k.Env(),
		Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	port, _, _ := authOrigin(t)
	base := "http://partner.test:" + port
	conf := []byte(k.Krb5Conf())
	member := "http://" + sq.Addr + " auth=negotiate"
	p := startProxy(t, proxyConf{members: []string{member},
		creds: credentials.NewStore(credentials.NewKerberos("alice", "alice-pw", nil, conf))})

	t.Run("forwarded", func(t *testing.T) {
		out, errOut, code := runCurl(t, "-x", "http://"+p.Addr, base+"/a", base+"/b")
		if code != 0 || out != "GET /a GET /b " {
			t.Fatalf("curl exit %d: %q %s", code, out, errOut)
		}
		sq.WaitLog(t, "GET "+base+"/b alice@"+k.Realm)
	})
	t.Run("connect", func(t *testing.T) {
		code, body, err := proxytest.Curl(t, p.Addr, base+"/tunnelled", true)
		if err != nil || code != "200" || body != "GET /tunnelled " {
			t.Fatalf("curl -p: %s %q %v", code, body, err)
		}
		sq.WaitLog(t, "CONNECT partner.test:"+port+" alice@"+k.Realm)
	})
	// The ticket goes with the first request: Squid never challenged.
	if n := countLog(sq, "TCP_DENIED/407"); n != 0 {
		t.Errorf("%d challenges, want none", n)
	}

	t.Run("wrong-password", func(t *testing.T) {
		bad := startProxy(t, proxyConf{members: []string{member},
			creds: credentials.NewStore(credentials.NewKerberos("alice", "wrong-pw", nil, conf))})
		for _, raw := range []string{
			"GET " + base + "/ HTTP/1.1\r\nHost: partner.test\r\n\r\n",
			"CONNECT partner.test:" + port + " HTTP/1.1\r\nHost: partner.test\r\n\r\n",
		} {
			resp, body := rawRequest(t, bad.Addr, raw)
			wantProxyStatus(t, resp, body, http.StatusBadGateway, "upstream_auth_required")
			ps := resp.Header.Get("Proxy-Status")
			if !strings.Contains(ps, "wrong password") || !strings.Contains(ps, "of alice") {
				t.Errorf("Proxy-Status %q does not say what failed", ps)
			}
			if strings.Contains(ps+body, "wrong-pw") {
				t.Errorf("the password is in the answer: %q %q", ps, body)
			}
		}
		// The refusals' access-log lines are written after their answers.
		waitFor(t, func() bool { return strings.Count(bad.Log.String(), `"error":"upstream_auth_required"`) >= 2 })
		if log := bad.Log.String(); strings.Contains(log, "wrong-pw") || !strings.Contains(log, "wrong password") {
			t.Errorf("log: password present or failure not named:\n%s", log)
		}
	})
	if strings.Contains(p.Log.String(), "alice-pw") {
		t.Error("the password reached the log")
	}
}

// TestNTLMUpstreamHTTPS forwards https:// URLs through an NTLM member:
// egret opens a tunnel (CONNECT with the handshake) and speaks TLS to the
// origin through it. The tunnel is pooled for its own client only.
func TestNTLMUpstreamHTTPS(t *testing.T) {
	skipShort(t)
	cert, _ := testutil.SelfSigned(t, "", "partner.test")
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "tls "+r.URL.Path)
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
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	sq := squid.Start(t, squid.Options{Auth: squid.AuthNTLM, Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	p := startProxyWith(t, proxyConf{members: []string{"http://CORP%5Calice:alice-pw@" + sq.Addr + " auth=ntlm"}},
		func(o *Options) { o.OriginTLS = &tls.Config{RootCAs: roots} })
	get := func(c *rawClient, path string) {
		t.Helper()
		c.Send("GET https://partner.test:%s/%s HTTP/1.1\r\nHost: partner.test\r\n\r\n", port, path)
		resp, body := c.Read("GET")
		if resp.StatusCode != 200 || body != "tls /"+path {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	a, b := dialRaw(t, p.Addr), dialRaw(t, p.Addr)
	get(a, "a1")
	get(a, "a2")
	if n := conns.Load(); n != 1 {
		t.Errorf("%d TLS connections for two requests of one client, want 1 (its tunnel pooled)", n)
	}
	get(b, "b1")
	if n := conns.Load(); n != 2 {
		t.Errorf("%d TLS connections after another client's request, want 2 (tunnels are not shared)", n)
	}
	a.C.Close()
	b.C.Close()
	waitFor(t, func() bool { return p.tr.Idle() == 0 })
	sq.WaitLog(t, "TCP_TUNNEL/200")
	if n := countLog(sq, "TCP_DENIED/407"); n != 2 {
		t.Errorf("%d NTLM challenges for two tunnels", n)
	}
}

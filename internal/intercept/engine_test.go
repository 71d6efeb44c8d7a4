package intercept

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/testutil/secretvol"
	"egret.io/egret/internal/testutil/tlslab"
)

const (
	injectedToken = "sk-egret-injected-0123456789abcdef"
	clientToken   = "client-own-token"
	injectedKey   = "key-egret-injected-fedcba9876543210"
)

// apiSite is a site for host with a bearer credential and an x-api-key
// from kubelet-style Secret volumes, and rules.
func apiSite(t testing.TB, host string, rules RulesSpec) (*Site, *secretvol.Volume) {
	t.Helper()
	vol := secretvol.New(t, map[string]string{"token": injectedToken + "\n", "key": injectedKey})
	site, err := CompileSite(SiteSpec{
		Hosts: []string{host},
		Credentials: []CredentialSpec{
			{Name: "default/api-token", Files: []string{vol.Dir + "/token"}},
			{Name: "default/api-key", Header: "x-api-key", Scheme: "raw", Files: []string{vol.Dir + "/key"}},
		},
		HTTP: rules,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := site.Load(); err != nil {
		t.Fatal(err)
	}
	return site, vol
}

func TestInjectsCredential(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	site, _ := apiSite(t, "api.example.test", RulesSpec{})
	l.setSites(site)
	for _, tc := range []struct {
		name  string
		h2    bool
		proto string
	}{{"http1", false, "HTTP/1.1"}, {"h2", true, "HTTP/2.0"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := l.client(tc.h2)
			resp, s := get(t, c, "POST", "https://api.example.test:"+port(l, "api.example.test")+"/v1/chat?stream=true&key=q",
				map[string]string{"Authorization": "Bearer " + clientToken, "X-Api-Key": "client-key", "X_Api_Key": "smuggled", "X-Other": "kept"}, strings.NewReader("hello"))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if resp.Proto != tc.proto || s.Proto != "HTTP/2.0" {
				t.Errorf("client spoke %s (want %s), the origin saw %s (want HTTP/2.0: egret offers h2 to the origin)", resp.Proto, tc.proto, s.Proto)
			}
			if got := s.Headers["Authorization"]; len(got) != 1 || got[0] != "Bearer "+injectedToken {
				t.Errorf("origin saw Authorization %q", got)
			}
			if got := s.Headers["X-Api-Key"]; len(got) != 1 || got[0] != injectedKey {
				t.Errorf("origin saw x-api-key %q", got)
			}
			for k, v := range s.Headers {
				if k != "X-Api-Key" && strings.EqualFold(strings.ReplaceAll(k, "_", "-"), "X-Api-Key") {
					t.Errorf("origin saw %s: %q beside the injected X-Api-Key (a CGI server reads both as HTTP_X_API_KEY)", k, v)
				}
			}
			if s.Headers["X-Other"][0] != "kept" || s.Body != 5 || s.Path != "/v1/chat" || s.Query != "stream=true&key=q" {
				t.Errorf("origin saw %+v", s)
			}
			if via := s.Headers["Via"]; len(via) != 1 || !strings.HasSuffix(via[0], " egret") {
				t.Errorf("Via = %q", via)
			}
			if strings.Contains(fmt.Sprint(resp.Header), injectedToken) {
				t.Errorf("the response carries the credential: %v", resp.Header)
			}
		})
	}
	evs := l.logged()
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	for _, ev := range evs {
		if ev.Method != "POST" || ev.Path != "/v1/chat" || ev.Status != 200 || ev.Decision != "allow" || len(ev.Credentials) != 2 || ev.BytesUp != 5 {
			t.Errorf("event %+v", ev)
		}
	}
}

func port(l *lab, host string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, p, _ := net.SplitHostPort(l.routes[host])
	return p
}

func TestRules(t *testing.T) {
	for _, mode := range []string{"enforce", "report"} {
		t.Run(mode, func(t *testing.T) {
			l := newLab(t)
			l.origin("api.example.test", nil, nil)
			site, _ := apiSite(t, "api.example.test", RulesSpec{Mode: mode, Rules: []RuleSpec{
				{Action: "deny", Paths: []string{"/v1/admin/**"}},
				{Action: "allow", Methods: []string{"GET"}, PathPrefixes: []string{"/v1"}},
				{Action: "allow", Methods: []string{"POST"}, Paths: []string{"/v1/*/completions"}},
			}})
			l.setSites(site)
			base := "https://api.example.test:" + port(l, "api.example.test")
			for _, h2 := range []bool{false, true} {
				c := l.client(h2)
				for _, tc := range []struct {
					method, path string
					denied       bool
				}{
					{"GET", "/v1/models", false},
					{"GET", "/v1", false},
					{"GET", "/v10", true},
					{"POST", "/v1/chat/completions", false},
					{"POST", "/v1/chat/x/completions", true},
					{"DELETE", "/v1/models", true},
					{"GET", "/v1/admin/users", true},
					{"GET", "/v1/x/../admin/users", true},
					{"GET", "/v1/%61dmin/users", true},
					{"GET", "/v1//admin/users", true},
					{"GET", "/v1/admin%2Fusers", true},
				} {
					resp, s := get(t, c, tc.method, base+tc.path+"?token=abc", nil, nil)
					want := 200
					if tc.denied && mode == "enforce" {
						want = 403
					}
					if resp.StatusCode != want {
						t.Errorf("h2=%v %s %s: status %d, want %d", h2, tc.method, tc.path, resp.StatusCode, want)
						continue
					}
					if want == 403 {
						ps := proxystatus.Parse(resp.Header.Values("Proxy-Status"))
						if len(ps) != 1 || ps[0].Params["error"] != "http_request_denied" || !strings.Contains(ps[0].Params["details"], "api.example.test") {
							t.Errorf("%s %s: Proxy-Status %q", tc.method, tc.path, resp.Header.Values("Proxy-Status"))
						}
						continue
					}
					if s.Path != tc.path && !strings.Contains(tc.path, "..") {
						t.Errorf("%s: the origin saw %q (egret must forward the path unchanged)", tc.path, s.Path)
					}
				}
			}
			for _, ev := range l.logged() {
				if strings.Contains(ev.Path, "?") || strings.Contains(ev.Path, "token") {
					t.Errorf("logged path %q holds the query", ev.Path)
				}
				if ev.Decision == "" || ev.Rule == "" || ev.Status == 0 {
					t.Errorf("event %+v", ev)
				}
				if mode == "report" && ev.Decision == "deny" {
					t.Errorf("report mode denied: %+v", ev)
				}
			}
		})
	}
}

// TestOriginVerification: an origin whose certificate egret cannot verify
// is a 502 with the reason in Proxy-Status; the client's own trust never
// enters into it.
func TestOriginVerification(t *testing.T) {
	l := newLab(t)
	rogue := tlslab.NewCA(t, "rogue root")
	l.origin("bad.example.test", rogue, nil)
	l.origin("wrongname.example.test", nil, nil)
	// A certificate for another name, from the trusted CA.
	l.mu.Lock()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: echoHandler(), ErrorLog: discardLog,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{l.originCA.Leaf(t, "other.example.test")}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	l.routes["wrongname.example.test"] = ln.Addr().String()
	l.mu.Unlock()
	for _, h2 := range []bool{false, true} {
		c := l.client(h2)
		for _, host := range []string{"bad.example.test", "wrongname.example.test"} {
			resp, _ := get(t, c, "GET", "https://"+host+":"+port(l, host)+"/", nil, nil)
			if resp.StatusCode != 502 {
				t.Fatalf("%s: status %d, want 502", host, resp.StatusCode)
			}
			ps := proxystatus.Parse(resp.Header.Values("Proxy-Status"))
			if len(ps) != 1 || ps[0].Params["error"] != "tls_certificate_error" || !strings.Contains(ps[0].Params["details"], host) {
				t.Errorf("%s: Proxy-Status %q", host, resp.Header.Values("Proxy-Status"))
			}
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), "did not verify") {
				t.Errorf("%s: body %q", host, b)
			}
		}
	}
}

// TestSNIMustAgree: a ClientHello for another name than the CONNECT's is
// refused, and no leaf is issued for it.
func TestSNIMustAgree(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	c, _ := l.tunnel(t, "api.example.test")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(l.caCert)
	tc := tls.Client(c, &tls.Config{ServerName: "bank.example.test", RootCAs: pool})
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake for another name succeeded")
	}
	waitFor(t, func() bool { return len(l.tunnels()) == 1 })
	var he *HandshakeError
	if err := l.tunnels()[0].err; !errorsAs(err, &he) || he.Reason != "sni_mismatch" {
		t.Errorf("tunnel error %v", err)
	}
	if st := l.issuer.Stats(); st.Signed != 0 {
		t.Errorf("signed %d leaves", st.Signed)
	}
}

// TestExemptStaysTunnel: an exempt name reaches the origin's own
// certificate (the client verifies it with the origin's CA, never egret's).
func TestExemptStaysTunnel(t *testing.T) {
	l := newLab(t)
	l.origin("pinned.example.test", nil, nil)
	site, err := CompileSite(SiteSpec{Hosts: []string{".example.test"}, Exempt: []string{"pinned.example.test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.setSites(site)
	pool := x509.NewCertPool()
	pool.AddCert(l.originCA.Cert) // the origin's CA only: egret's leaf would fail
	c := l.client(true)
	c.Transport.(*http.Transport).TLSClientConfig.RootCAs = pool
	var peer *x509.Certificate
	c.Transport.(*http.Transport).TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
		peer = cs.PeerCertificates[0]
		return nil
	}
	resp, s := get(t, c, "GET", "https://pinned.example.test:"+port(l, "pinned.example.test")+"/", map[string]string{"Authorization": "Bearer " + clientToken}, nil)
	if resp.StatusCode != 200 || s.Headers["Authorization"][0] != "Bearer "+clientToken {
		t.Fatalf("status %d, origin saw %v", resp.StatusCode, s.Headers["Authorization"])
	}
	if peer == nil || peer.Issuer.CommonName != l.originCA.Cert.Subject.CommonName {
		t.Errorf("the client saw a certificate from %v", peer.Issuer)
	}
	c.Transport.(*http.Transport).CloseIdleConnections()
	waitFor(t, func() bool { return len(l.tunnels()) == 1 })
	if r := l.tunnels()[0]; !r.res.Exempt || r.res.SNI != "pinned.example.test" {
		t.Errorf("result %+v", r)
	}
	if len(l.logged()) != 0 {
		t.Errorf("requests of an exempt tunnel were logged as intercepted")
	}
}

// TestMisdirected: a request for another host inside the tunnel is refused.
func TestMisdirected(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	for _, h2 := range []bool{false, true} {
		c := l.client(h2)
		req, _ := http.NewRequest("GET", "https://api.example.test:"+port(l, "api.example.test")+"/", nil)
		req.Host = "internal.example.test"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("h2=%v: status %d, want 421", h2, resp.StatusCode)
		}
	}
}

func TestServerSentEventsStream(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	for _, h2 := range []bool{false, true} {
		// The origin sends the other events only once the client has the
		// first (a gate, not a clock): a buffered stream shows none.
		id := fmt.Sprintf("sse-h2-%v", h2)
		gate := make(chan struct{})
		sseGates.Store(id, gate)
		t.Cleanup(func() { sseGates.Delete(id) })
		c := l.client(h2)
		resp, err := c.Get("https://api.example.test:" + port(l, "api.example.test") + "/sse?gate=" + id)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		first := make(chan string, 1)
		go func() { line, _ := br.ReadString('\n'); first <- line }()
		select {
		case line := <-first:
			if line != "data: event 0\n" {
				t.Fatalf("h2=%v: first line %q", h2, line)
			}
		case <-time.After(20 * time.Second):
			resp.Body.Close()
			t.Fatalf("h2=%v: the first event never came while the origin held the rest (buffered)", h2)
		}
		close(gate)
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		if !strings.Contains(string(rest), "event 2") {
			t.Errorf("rest %q", rest)
		}
	}
}

// TestBodiesStream: the origin echoes each chunk of the request body while
// the client is still sending: nothing waits for a whole body.
func TestBodiesStream(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	for _, h2 := range []bool{false, true} {
		c := l.client(h2)
		pr, pw := io.Pipe()
		req, _ := http.NewRequest("POST", "https://api.example.test:"+port(l, "api.example.test")+"/stream", pr)
		done := make(chan *http.Response, 1)
		go func() {
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				close(done)
				return
			}
			done <- resp
		}()
		pw.Write([]byte("chunk-1"))
		var resp *http.Response
		select {
		case resp = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("h2=%v: no response header while the body is open", h2)
		}
		if resp == nil {
			return
		}
		buf := make([]byte, 64)
		n, err := io.ReadAtLeast(resp.Body, buf, len("chunk-1"))
		if err != nil || string(buf[:n]) != "chunk-1" {
			t.Fatalf("h2=%v: read %q, %v", h2, buf[:n], err)
		}
		pw.Write([]byte("chunk-2"))
		n, err = io.ReadAtLeast(resp.Body, buf, len("chunk-2"))
		if err != nil || string(buf[:n]) != "chunk-2" {
			t.Fatalf("h2=%v: read %q, %v", h2, buf[:n], err)
		}
		pw.Close()
		resp.Body.Close()
	}
}

func TestWebSocket(t *testing.T) {
	l := newLab(t)
	l.origin("ws.example.test", nil, nil)
	c, err := net.Dial("tcp", l.front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := port(l, "ws.example.test")
	fmt.Fprintf(c, "CONNECT ws.example.test:%s HTTP/1.1\r\nHost: x\r\n\r\n", p)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatal(resp, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(l.caCert)
	tc := tls.Client(c, &tls.Config{ServerName: "ws.example.test", RootCAs: pool, NextProtos: []string{"http/1.1"}})
	cfg, _ := websocket.NewConfig("wss://ws.example.test:"+p+"/ws", "https://ws.example.test")
	ws, err := websocket.NewClient(cfg, tc)
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"hello", "again"} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
			t.Fatalf("echo %q, %v", got, err)
		}
	}
	ws.Close()
	waitFor(t, func() bool { return len(l.logged()) == 1 })
	if ev := l.logged()[0]; ev.Status != 101 || ev.Path != "/ws" {
		t.Errorf("event %+v", ev)
	}
}

// TestCredentialRotation: the kubelet swaps the Secret while requests run;
// every request succeeds, with the old value or the new, and the new one
// arrives without a restart.
func TestCredentialRotation(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	site, vol := apiSite(t, "api.example.test", RulesSpec{})
	for _, c := range site.Credentials {
		c.Interval = time.Hour // fsnotify only
	}
	ctx, cancel := contextWithCancel()
	done := make(chan struct{})
	go func() { site.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	l.setSites(site)
	time.Sleep(50 * time.Millisecond)
	c := l.client(true)
	u := "https://api.example.test:" + port(l, "api.example.test") + "/"
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	var fails []string
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(u)
				if err != nil {
					mu.Lock()
					fails = append(fails, err.Error())
					mu.Unlock()
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					mu.Lock()
					fails = append(fails, resp.Status)
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	vol.Update(t, map[string]string{"token": "rotated-token-2", "key": injectedKey})
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, s := get(t, c, "GET", u, nil, nil)
		if s.Headers["Authorization"][0] == "Bearer rotated-token-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rotated credential never reached the origin")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(fails) > 0 {
		t.Errorf("%d requests failed during the rotation, the first: %s", len(fails), fails[0])
	}
}

// TestCredentialNotLoaded: a site whose credential was never read refuses
// requests (503) rather than send them without it.
func TestCredentialNotLoaded(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	site, err := CompileSite(SiteSpec{Hosts: []string{"api.example.test"},
		Credentials: []CredentialSpec{{Name: "default/missing", Files: []string{t.TempDir() + "/token"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := site.Load(); err == nil {
		t.Fatal("loading a missing file succeeded")
	}
	l.setSites(site)
	resp, _ := get(t, l.client(true), "GET", "https://api.example.test:"+port(l, "api.example.test")+"/", map[string]string{"Authorization": "Bearer " + clientToken}, nil)
	if resp.StatusCode != 503 || !strings.Contains(resp.Header.Get("Proxy-Status"), "proxy_configuration_error") {
		t.Errorf("status %d, Proxy-Status %q", resp.StatusCode, resp.Header.Get("Proxy-Status"))
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCARotationUnderTraffic rotates the interception CA with the overlap
// while clients that hold the bundle of both keep opening connections: no
// request fails, and after the switch new connections get leaves of the
// new CA.
func TestCARotationUnderTraffic(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	_, c1, k1 := newAuthority(t, "CA one")
	_, c2, k2 := newAuthority(t, "CA two")
	vol := secretvol.New(t, map[string]string{CertFile: string(c1), KeyFile: string(k1), TrustFile: string(c2)})
	d := &CADir{Path: vol.Dir, Issuer: l.issuer, Interval: time.Hour}
	if _, err := d.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithCancel()
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(50 * time.Millisecond)
	// The pods' bundle: both CAs (step 1 of the rotation).
	l.caCert = l.issuer.Authority().BundlePEM()
	u := "https://api.example.test:" + port(l, "api.example.test") + "/"
	var mu sync.Mutex
	var fails []string
	issuers := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := l.client(false)
				var issuer string
				c.Transport.(*http.Transport).TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
					issuer = cs.PeerCertificates[0].Issuer.CommonName
					return nil
				}
				resp, err := c.Get(u)
				c.Transport.(*http.Transport).CloseIdleConnections()
				mu.Lock()
				if err != nil {
					fails = append(fails, err.Error())
				} else {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						fails = append(fails, resp.Status)
					}
					issuers[issuer]++
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	// Step 2: the new CA signs, the old one stays trusted.
	vol.Update(t, map[string]string{CertFile: string(c2), KeyFile: string(k2), TrustFile: string(c1)})
	waitFor(t, func() bool { return l.issuer.Authority().Cert.Subject.CommonName == "CA two" })
	before := func() int { mu.Lock(); defer mu.Unlock(); return issuers["CA two"] }
	waitFor(t, func() bool { return before() >= 5 })
	close(stop)
	wg.Wait()
	if len(fails) > 0 {
		t.Errorf("%d requests failed during the rotation, the first: %s", len(fails), fails[0])
	}
	if issuers["CA one"] == 0 || issuers["CA two"] == 0 {
		t.Errorf("leaves by issuer: %v", issuers)
	}
}

// TestExemptNameMustBeTheTarget: a ClientHello naming an exempt host
// inside a tunnel admitted for another (intercepted) host is an SNI
// mismatch, never a passthrough: an opaque tunnel to api's address would
// skip api's method/path rules.
func TestExemptNameMustBeTheTarget(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	site, err := CompileSite(SiteSpec{Hosts: []string{".example.test"}, Exempt: []string{"pinned.example.test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.setSites(site)
	c, _ := l.tunnel(t, "api.example.test")
	tc := tls.Client(c, &tls.Config{ServerName: "PINNED.example.test.", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Errorf("a handshake naming the exempt host went through a tunnel admitted for api (peer %s)", tc.ConnectionState().PeerCertificates[0].Subject)
	}
	tc.Close()
	waitFor(t, func() bool { return len(l.tunnels()) == 1 })
	r := l.tunnels()[0]
	var he *HandshakeError
	if r.res.Exempt || !errorsAs(r.err, &he) || he.Reason != "sni_mismatch" {
		t.Errorf("result %+v, error %v: want sni_mismatch, no passthrough", r.res, r.err)
	}
}

// TestPlainHTTPInTunnelRefused: plain HTTP in a tunnel to a site (Node's
// fetch tunnels http:// URLs) gets a 403 naming the fix, not a TLS error,
// and never reaches the origin; bytes that are neither TLS nor HTTP only
// close the tunnel.
func TestPlainHTTPInTunnelRefused(t *testing.T) {
	l := newLab(t)
	l.origin("api.example.test", nil, nil)
	c, br := l.tunnel(t, "api.example.test")
	fmt.Fprintf(c, "GET /v1/secret HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer pod-own\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(resp.Header.Get("Proxy-Status"), "http_request_denied") ||
		!strings.Contains(string(body), "https://") {
		t.Errorf("plain HTTP in the tunnel: %d %q %q, want 403 http_request_denied naming https://", resp.StatusCode, resp.Header.Get("Proxy-Status"), body)
	}
	waitFor(t, func() bool { return len(l.tunnels()) == 1 })
	var he *HandshakeError
	if err := l.tunnels()[0].err; !errorsAs(err, &he) || he.Reason != "plain_http" {
		t.Errorf("tunnel error %v, want plain_http", err)
	}
	if ev := l.logged(); len(ev) != 0 {
		t.Errorf("the origin was asked %d requests", len(ev))
	}

	c, br = l.tunnel(t, "api.example.test")
	c.Write([]byte{0x00, 0x01, 0x02})
	if b, err := br.ReadByte(); err == nil {
		t.Errorf("binary junk got an answer starting %q", b)
	}
	waitFor(t, func() bool { return len(l.tunnels()) == 2 })
	if err := l.tunnels()[1].err; !errorsAs(err, &he) || he.Reason != "not_tls" {
		t.Errorf("tunnel error %v, want not_tls", err)
	}
}

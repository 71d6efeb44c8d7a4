package policy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/proxyd"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/upstream"
)

// TestInterceptPolicyAgainstAPIServer: EgressPolicies with intercept,
// against the real API server. A workload whose policy intercepts a host
// gets its credential from a Secret of its own namespace that the
// gateway's configuration grants: the origin receives it in place of the
// client's own header, its method rule answers 403, and a rotation of the
// Secret takes effect without a restart (its deletion refuses requests,
// never sends them bare). A policy that names a Secret the gateway does
// not grant — another namespace's included — is invalid
// (SecretNotGranted) and denies everything to its pods. A workload whose
// policy does not intercept keeps an opaque tunnel. No secret reaches the
// log, a status or a response.
func TestInterceptPolicyAgainstAPIServer(t *testing.T) {
	c := requireCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	shop := c.Namespace(t, "icpt-shop", nil)
	other := c.Namespace(t, "icpt-other", nil)
	const (
		secret1 = "sk-shop-1-9f8e7d6c-never-in-the-pod"
		secret2 = "sk-shop-2-1a2b3c4d-never-in-the-pod"
		foreign = "sk-other-5e6f7a8b-another-namespace"
	)
	mkSecret := func(ns, name, token string) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"token": []byte(token + "\n")}}
		if _, err := c.Clientset.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mkSecret(shop, "openai", secret1)
	mkSecret(other, "stolen", foreign)

	// The origin, with TLS from its own CA, recording what it received.
	dir := t.TempDir()
	originCert, originCAFile := testutil.SelfSigned(t, dir, "api.test", "plain.test")
	var mu sync.Mutex
	var seenAuth []string
	oln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	osrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenAuth = append(seenAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintf(w, "origin %s %s %s", r.Method, r.URL.Path, r.Proto)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{originCert}}}
	go osrv.ServeTLS(oln, "", "")
	t.Cleanup(func() { osrv.Close() })
	_, port, _ := net.SplitHostPort(oln.Addr().String())
	lastAuth := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seenAuth) == 0 {
			return ""
		}
		return seenAuth[len(seenAuth)-1]
	}
	originPEM, err := os.ReadFile(originCAFile)
	if err != nil {
		t.Fatal(err)
	}

	// The gateway: the policy engine with interception (the Secrets of
	// intercept.secrets), and the interception engine.
	caPEM, keyPEM, err := intercept.GenerateCA("egret test interception CA", 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := intercept.ParseAuthority(caPEM, keyPEM, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	iss := &intercept.Issuer{}
	iss.SetAuthority(auth)
	roots, err := intercept.OriginRoots(originPEM)
	if err != nil {
		t.Fatal(err)
	}
	log := &testutil.SyncBuffer{}
	slogger := slog.New(slog.NewJSONHandler(log, nil))
	eng := &intercept.Engine{Issuer: iss, RootCAs: roots, Log: func(ev *intercept.Event) {
		slogger.LogAttrs(context.Background(), slog.LevelInfo, "request", ev.Attrs()...)
	}}
	pods := identity.NewPods()
	go identity.Watch(ctx, c.Clientset, pods)
	grants := []string{shop + "/openai", other + "/stolen"}
	pe := &policy.Engine{Pods: pods, Intercept: &policy.Secrets{Client: c.Clientset, Context: ctx, Logger: slogger,
		Grants: func() []string { return grants }}}
	w := &policy.Watcher{Client: c.dyn, Engine: pe, Logger: slogger}
	if err := w.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := identity.WaitSynced(ctx, pods); err != nil {
		t.Fatal(err)
	}
	tbl, err := route.New(nil, route.Direct, "")
	if err != nil {
		t.Fatal(err)
	}
	names := hosts{"api.test": "127.0.0.1", "plain.test": "127.0.0.1"}
	icpt := &proxy.Interception{Engine: eng}
	m := metrics.New("test")
	m.SetIntercept(proxyd.InterceptMetrics(icpt))
	s, err := proxy.New(proxy.Options{Via: "gw-test", Resolver: names, AccessLog: log, Workloads: proxyd.Workloads(pe),
		Intercept: icpt, Metrics: m},
		&proxy.State{Routes: tbl, Pools: map[string]*upstream.Pool{}, DefaultPool: "default"})
	if err != nil {
		t.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(gln)
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeSOCKS(sln, proxy.SOCKSOptions{})
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	originAddr := netip.MustParseAddrPort(oln.Addr().String())
	go s.ServeTransparent(tln, proxy.TransparentOptions{OriginalDst: func(net.Conn) (netip.AddrPort, error) { return originAddr, nil }})
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		s.Shutdown(sctx)
	})

	c.apply(t, fmt.Sprintf(`
metadata: {name: web, namespace: %s}
spec:
  podSelector: {matchLabels: {app: web}}
  egress:
  - {action: allow, hosts: [api.test, plain.test]}
  intercept:
  - hosts: [api.test]
    credentials:
    - {secret: openai}
    http:
      rules:
      - {action: deny, methods: [DELETE]}
      - {action: allow, pathPrefixes: [/v1]}`, shop))
	// A Secret of the policy's namespace that is not granted: the name
	// of another namespace's granted Secret does not reach it.
	c.apply(t, fmt.Sprintf(`
metadata: {name: thief, namespace: %s}
spec:
  podSelector: {matchLabels: {app: thief}}
  egress:
  - {action: allow, hosts: [api.test]}
  intercept:
  - hosts: [api.test]
    credentials:
    - {secret: stolen}`, shop))
	c.apply(t, fmt.Sprintf(`
metadata: {name: plain, namespace: %s}
spec:
  egress:
  - {action: allow, hosts: [api.test]}`, other))
	_, webIP := c.pod(t, shop, "web", "", map[string]string{"app": "web"})
	_, thiefIP := c.pod(t, shop, "thief", "", map[string]string{"app": "thief"})
	_, otherIP := c.pod(t, other, "job", "", nil)

	if cond := c.condition(t, shop, "thief"); cond.Status != metav1.ConditionFalse || cond.Reason != policy.ReasonSecretNotGranted ||
		!strings.Contains(cond.Message, shop+"/stolen is not granted") {
		t.Errorf("thief's condition = %s %s %q, want False %s naming %s/stolen", cond.Status, cond.Reason, cond.Message, policy.ReasonSecretNotGranted, shop)
	}
	if cond := c.condition(t, shop, "web"); cond.Status != metav1.ConditionTrue {
		t.Errorf("web's condition = %s %s %q, want True", cond.Status, cond.Reason, cond.Message)
	}
	if cp := policy.Compile(parsePolicy(t, fmt.Sprintf(`
metadata: {name: cross, namespace: %s}
spec: {intercept: [{hosts: [api.test], credentials: [{secret: %s/stolen}]}]}`, shop, other)), false, nil); cp.Err == nil {
		t.Error("an EgressPolicy naming another namespace's Secret compiled")
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	pool.AppendCertsFromPEM(originPEM)
	// client reaches the origin from src through the gateway's listener
	// kind: connect (HTTP CONNECT), socks5 (with the name) or transparent
	// (redirected: the client dials the origin).
	client := func(kind, src string) *http.Client {
		tr := &http.Transport{
			DialContext:       func(_ context.Context, _, addr string) (net.Conn, error) { return dialFrom(src, addr) },
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			ForceAttemptHTTP2: true,
			DisableKeepAlives: true,
		}
		switch kind {
		case "connect":
			tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: gln.Addr().String()})
		case "socks5":
			tr.Proxy = http.ProxyURL(&url.URL{Scheme: "socks5h", Host: sln.Addr().String()})
		case "transparent":
			tr.DialContext = func(context.Context, string, string) (net.Conn, error) { return dialFrom(src, tln.Addr().String()) }
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: tr}
	}
	var bodies strings.Builder // every response, scanned for the secret
	var bodiesMu sync.Mutex
	var doVia func(kind, src, method, path string) (int, string, http.Header, error)
	do := func(src, method, path string) (int, string, http.Header, error) {
		return doVia("connect", src, method, path)
	}
	doVia = func(kind, src, method, path string) (int, string, http.Header, error) {
		req, _ := http.NewRequest(method, "https://api.test:"+port+path, nil)
		req.Header.Set("Authorization", "Bearer the-pods-own")
		resp, err := client(kind, src).Do(req)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		bodiesMu.Lock()
		defer bodiesMu.Unlock()
		bodies.Write(b)
		for k, v := range resp.Header {
			fmt.Fprintf(&bodies, "%s: %s\n", k, v)
		}
		return resp.StatusCode, string(b), resp.Header, nil
	}

	eventually(t, 10*time.Second, "the web pod's policy and Secret in force", func() bool {
		st, _, _, err := do(webIP, "GET", "/v1/models")
		return err == nil && st == 200 && lastAuth() == "Bearer "+secret1
	})
	t.Run("credential-injected", func(t *testing.T) {
		st, body, _, err := do(webIP, "GET", "/v1/models")
		if err != nil || st != 200 {
			t.Fatalf("GET = %d %v", st, err)
		}
		if got := lastAuth(); got != "Bearer "+secret1 {
			t.Errorf("the origin received Authorization %q, want the Secret's (the pod's own replaced)", got)
		}
		if !strings.Contains(body, "HTTP/2.0") {
			t.Errorf("body %q: the origin was not reached over HTTP/2", body)
		}
	})
	// The same hook on every listener: a site's credential and rules hold
	// on SOCKS5 and transparent tunnels as on CONNECT.
	t.Run("every-listener", func(t *testing.T) {
		for _, kind := range []string{"connect", "socks5", "transparent"} {
			t.Run(kind, func(t *testing.T) {
				st, _, _, err := doVia(kind, webIP, "GET", "/v1/models")
				if err != nil || st != 200 || lastAuth() != "Bearer "+secret1 {
					t.Errorf("GET = %d %v, the origin received %q; want 200 with the Secret's credential", st, err, lastAuth())
				}
				st, _, h, err := doVia(kind, webIP, "DELETE", "/v1/files/f-1")
				if err != nil || st != 403 || !strings.Contains(h.Get("Proxy-Status"), "http_request_denied") {
					t.Errorf("DELETE = %d %v (Proxy-Status %q), want 403", st, err, h.Get("Proxy-Status"))
				}
				// Another namespace's pod, whose policy does not intercept:
				// an opaque tunnel, its own header untouched.
				st, _, _, err = doVia(kind, otherIP, "GET", "/v1/models")
				if err != nil || st != 200 || lastAuth() != "Bearer the-pods-own" {
					t.Errorf("other namespace: GET = %d %v, the origin received %q; want the pod's own header", st, err, lastAuth())
				}
			})
		}
	})
	t.Run("method-denied", func(t *testing.T) {
		n := len(seenAuth)
		st, _, h, err := do(webIP, "DELETE", "/v1/files/f-1")
		if err != nil || st != 403 || !strings.Contains(h.Get("Proxy-Status"), "http_request_denied") {
			t.Errorf("DELETE = %d %v, Proxy-Status %q; want 403 http_request_denied", st, err, h.Get("Proxy-Status"))
		}
		st, _, _, err = do(webIP, "GET", "/admin")
		if err != nil || st != 403 {
			t.Errorf("GET /admin (no rule allows) = %d %v, want 403", st, err)
		}
		mu.Lock()
		if len(seenAuth) != n {
			t.Error("a denied request reached the origin")
		}
		mu.Unlock()
	})
	t.Run("secret-rotated", func(t *testing.T) {
		// Traffic runs through the rotation: no request fails, and each
		// carries the old value or the new one.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var failed atomic.Int64
		var failure atomic.Value
		mu.Lock()
		from := len(seenAuth)
		mu.Unlock()
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if st, _, _, err := do(webIP, "GET", "/v1/models"); err != nil || st != 200 {
						failed.Add(1)
						failure.Store(fmt.Sprintf("%d %v", st, err))
					}
				}
			})
		}
		defer func() {
			close(stop)
			wg.Wait()
			if n := failed.Load(); n > 0 {
				t.Errorf("%d requests failed during the rotation (last: %v)", n, failure.Load())
			}
			mu.Lock()
			defer mu.Unlock()
			for _, a := range seenAuth[from:] {
				if a != "Bearer "+secret1 && a != "Bearer "+secret2 {
					t.Errorf("during the rotation the origin received %q", a)
					break
				}
			}
		}()
		time.Sleep(200 * time.Millisecond)
		sec, err := c.Clientset.CoreV1().Secrets(shop).Get(ctx, "openai", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec.Data["token"] = []byte(secret2)
		if _, err := c.Clientset.CoreV1().Secrets(shop).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the rotated Secret in force", func() bool {
			st, _, _, err := do(webIP, "GET", "/v1/models")
			return err == nil && st == 200 && lastAuth() == "Bearer "+secret2
		})
		time.Sleep(200 * time.Millisecond)
	})
	t.Run("secret-deleted-refuses", func(t *testing.T) {
		if err := c.Clientset.CoreV1().Secrets(shop).Delete(ctx, "openai", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "requests refused once the Secret is gone", func() bool {
			st, _, h, err := do(webIP, "GET", "/v1/models")
			return err == nil && st == 503 && strings.Contains(h.Get("Proxy-Status"), "proxy_configuration_error")
		})
		mkSecret(shop, "openai", secret1)
		eventually(t, 10*time.Second, "the recreated Secret in force", func() bool {
			st, _, _, err := do(webIP, "GET", "/v1/models")
			return err == nil && st == 200 && lastAuth() == "Bearer "+secret1
		})
	})
	t.Run("ungranted-secret-denies-everything", func(t *testing.T) {
		if _, _, _, err := do(thiefIP, "GET", "/v1/models"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("the thief's CONNECT: %v, want a 403 refusal", err)
		}
	})
	t.Run("no-intercept-is-opaque", func(t *testing.T) {
		st, _, _, err := do(otherIP, "GET", "/v1/models")
		if err != nil || st != 200 {
			t.Fatalf("GET = %d %v", st, err)
		}
		if got := lastAuth(); got != "Bearer the-pods-own" {
			t.Errorf("the origin received %q through an opaque tunnel, want the pod's own header", got)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		scrape := rec.Body.String()
		bodies.WriteString(scrape) // scanned below
		for _, re := range []string{
			`egret_intercept_handshakes_total\{result="ok"\} [1-9]`,
			`egret_intercept_requests_total\{verdict="allowed"\} [1-9]`,
			`egret_intercept_requests_total\{verdict="denied"\} [1-9]`,
			`egret_intercept_requests_total\{verdict="failed"\} [1-9]`, // the 503s while the Secret was gone
			`egret_intercept_leaves_signed_total [1-9]`,
			`egret_intercept_leaf_cache_hits_total [1-9]`,
		} {
			if !regexp.MustCompile(re).MatchString(scrape) {
				t.Errorf("the scrape lacks %s", re)
			}
		}
		if n := strings.Count(scrape, "egret_intercept_handshakes_total{"); n != len(metrics.InterceptHandshakeResults) {
			t.Errorf("%d handshake series, want the fixed %d", n, len(metrics.InterceptHandshakeResults))
		}
	})
	t.Run("no-secret-anywhere", func(t *testing.T) {
		var all strings.Builder
		all.WriteString(log.String())
		all.WriteString(bodies.String())
		for _, name := range []string{"web", "thief"} {
			cond := c.condition(t, shop, name)
			all.WriteString(cond.Message)
		}
		for _, sec := range []string{secret1, secret2, foreign, "sk-shop", "sk-other"} {
			if strings.Contains(all.String(), sec) {
				t.Errorf("%q appears in the log, a status or a response", sec)
			}
		}
		if !strings.Contains(log.String(), `"credentials":["`+shop+`/openai"]`) {
			t.Errorf("the request lines do not name the credential %s/openai:\n%s", shop, log.String())
		}
	})
}

package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
)

// interceptSecret is the credential egret holds; the client never has it.
const interceptSecret = "sk-e2e-7f3a9c1d-never-in-the-pod"

// originSeen is what the test's origin recorded of one request.
type originSeen struct {
	sni, host, path, auth string
}

// TestGatewayIntercept runs the built `egret proxy --role gateway` with the
// configuration of docs/interception.md: a CONNECT to a site, once admitted,
// is intercepted (the client sees egret's leaf and the origin receives the
// credential in place of the client's own header); a host outside the sites
// stays an opaque tunnel (the client sees the origin's own certificate); an
// exempt server name is passed through; a denied destination is still
// denied. The credential never appears in egret's output.
func TestGatewayIntercept(t *testing.T) {
	netns.Require(t, "curl")
	ns := netns.New(t, "icpt")
	const originIP = "192.168.78.30"
	ns.Run(t, "ip", "addr", "add", originIP+"/32", "dev", "lo")
	dir := sharedDir(t)

	// The origin: TLS with its own CA, which egret is told to trust.
	names := []string{"api.partner.example", "pinned.partner.example", "plain.example.org", "blocked.partner.example"}
	originCert, originCA := testutil.SelfSigned(t, dir, names...)
	var mu sync.Mutex
	var seen []originSeen
	ln, err := ns.Listen("tcp", originIP+":443")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, originSeen{sni: r.TLS.ServerName, host: r.Host, path: r.URL.Path, auth: r.Header.Get("Authorization")})
		mu.Unlock()
		fmt.Fprintf(w, "origin %s %s\n", r.Host, r.URL.Path)
	})}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{originCert}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	last := func() originSeen {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return originSeen{}
		}
		return seen[len(seen)-1]
	}

	// The interception CA Secret and the credential Secret, as mounted.
	caDir, credDir := filepath.Join(dir, "intercept-ca"), filepath.Join(dir, "credentials", "partner-api")
	for _, d := range []string{caDir, credDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	caPEM, keyPEM, err := intercept.GenerateCA("egret e2e interception CA", 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(caDir, "tls.crt"), string(caPEM))
	writeFile(t, filepath.Join(caDir, "tls.key"), string(keyPEM))
	writeFile(t, filepath.Join(credDir, "token"), interceptSecret+"\n")
	// What the pod trusts: egret's CA (the trust bundle) — and, for the
	// tunnels egret does not open, the origin's own CA.
	bundle := filepath.Join(dir, "bundle.pem")
	ob, _ := os.ReadFile(originCA)
	writeFile(t, bundle, string(caPEM)+string(ob))

	// The configuration file: docs/interception.md's example, its paths
	// moved under dir.
	conf := interceptDocExample(t)
	conf = strings.ReplaceAll(conf, "/var/run/secrets/egret", dir)
	conf = strings.ReplaceAll(conf, "/etc/egret/origin-ca.crt", originCA)
	confPath := filepath.Join(dir, "egret.yaml")
	writeFile(t, confPath, conf)
	hosts := filepath.Join(dir, "hosts")
	var hb strings.Builder
	for _, n := range names {
		fmt.Fprintf(&hb, "%s %s\n", originIP, n)
	}
	// A site's name that resolves to an address the SSRF guard refuses.
	hb.WriteString("127.0.0.1 internal.partner.example\n")
	writeFile(t, hosts, hb.String())

	w := &world{ns: ns, dir: dir}
	w.start(t, "egret", []string{"PATH=" + os.Getenv("PATH"), "EGRET_HOSTS_FILE=" + hosts, "EGRET_DNS_SERVERS=127.0.0.1:1",
		"LISTEN_ADDR=" + egretAddr, "ADMIN_LISTEN_ADDR=" + adminAddr, "EGRET_SSRF_ALLOW_CIDRS=" + originIP + "/32"},
		egretBin, "proxy", "--role", "gateway", "--config", confPath)
	w.waitPort(t, egretAddr)
	egretLog := filepath.Join(dir, "egret.log")

	curl := func(cacert, url string, extra ...string) (string, error) {
		argv := append([]string{"curl", "-sS", "--max-time", "10", "--proxy", "http://" + egretAddr, "--cacert", cacert,
			"-H", "Authorization: Bearer pod-own-token"}, extra...)
		return w.client(t, nil, append(argv, url)...)
	}

	t.Run("intercepted", func(t *testing.T) {
		// The client trusts egret's CA only: it can talk to the site only
		// through egret's leaf.
		caOnly := filepath.Join(dir, "egret-ca.pem")
		writeFile(t, caOnly, string(caPEM))
		out, err := curl(caOnly, "https://api.partner.example/v1/echo?q=secret-query")
		if err != nil || !strings.Contains(out, "origin api.partner.example /v1/echo") {
			t.Fatalf("curl: %q %v", out, err)
		}
		if s := last(); s.auth != "Bearer "+interceptSecret || s.path != "/v1/echo" {
			t.Errorf("origin saw %+v, want the injected credential", s)
		}
		if strings.Contains(out, interceptSecret) {
			t.Errorf("the client received the credential: %q", out)
		}
		line := tunnelLine(t, egretLog, "api.partner.example:443")
		if line["intercepted"] != true || line["site"] != ".partner.example" || line["bytes_up"].(float64) < 200 || line["bytes_down"].(float64) < 200 {
			t.Errorf("tunnel line %v", line)
		}
		// The method/path rules: DELETE and a path outside /v1 are 403.
		for _, tc := range []struct{ method, path string }{{"DELETE", "/v1/echo"}, {"GET", "/admin"}} {
			n := count()
			out, err := curl(caOnly, "https://api.partner.example"+tc.path, "-o", "/dev/null", "-w", "%{http_code}", "-X", tc.method)
			if err != nil || out != "403" {
				t.Errorf("%s %s: %q %v, want 403", tc.method, tc.path, out, err)
			}
			if count() != n {
				t.Errorf("%s %s reached the origin", tc.method, tc.path)
			}
		}
	})

	t.Run("python-requests", func(t *testing.T) {
		testutil.NeedTool(t, "python3")
		script := `import requests
r = requests.get("https://api.partner.example/v1/py", headers={"Authorization": "Bearer pod-own-token"}, timeout=10)
print(r.status_code, r.text.strip())`
		env := []string{"HTTPS_PROXY=http://" + egretAddr, "REQUESTS_CA_BUNDLE=" + filepath.Join(dir, "egret-ca.pem")}
		out, err := w.client(t, env, "python3", "-c", script)
		if err != nil {
			if strings.Contains(err.Error(), "No module named 'requests'") {
				testutil.Missing(t, "python3 requests is not installed")
			}
			t.Fatal(err)
		}
		if !strings.Contains(out, "200 origin api.partner.example /v1/py") {
			t.Errorf("python: %q", out)
		}
		if s := last(); s.auth != "Bearer "+interceptSecret || s.path != "/v1/py" {
			t.Errorf("origin saw %+v", s)
		}
	})

	t.Run("opaque-tunnel", func(t *testing.T) {
		// Not a site: the client's TLS reaches the origin itself. It
		// verifies with the origin's CA alone, and keeps its own header.
		out, err := curl(originCA, "https://plain.example.org/x")
		if err != nil || !strings.Contains(out, "origin plain.example.org /x") {
			t.Fatalf("curl: %q %v", out, err)
		}
		if s := last(); s.auth != "Bearer pod-own-token" {
			t.Errorf("origin saw %+v, want the client's own header", s)
		}
		if line := tunnelLine(t, egretLog, "plain.example.org:443"); line["intercepted"] != nil {
			t.Errorf("tunnel line %v", line)
		}
	})

	t.Run("exempt", func(t *testing.T) {
		out, err := curl(originCA, "https://pinned.partner.example/v1/pin")
		if err != nil || !strings.Contains(out, "origin pinned.partner.example /v1/pin") {
			t.Fatalf("curl: %q %v", out, err)
		}
		if s := last(); s.auth != "Bearer pod-own-token" || s.sni != "pinned.partner.example" {
			t.Errorf("origin saw %+v, want the client's own handshake and header", s)
		}
		line := tunnelLine(t, egretLog, "pinned.partner.example:443")
		if line["intercepted"] != true || line["exempt"] != true {
			t.Errorf("tunnel line %v", line)
		}
	})

	t.Run("denied", func(t *testing.T) {
		// A site's name that the routes deny is refused before anything
		// is intercepted.
		n := count()
		out, err := curl(bundle, "https://blocked.partner.example/v1/x", "-o", "/dev/null", "-w", "%{http_code}")
		if err == nil || !strings.Contains(err.Error(), "CONNECT tunnel failed, response 403") {
			t.Errorf("blocked: %q %v, want the CONNECT refused with 403", out, err)
		}
		if line := tunnelLine(t, egretLog, "blocked.partner.example:443"); line["status"] != float64(403) || line["intercepted"] != nil {
			t.Errorf("line %v", line)
		}
		// The SSRF guard judges the approved address before anything is
		// intercepted: a site's name resolving to loopback is refused.
		_, err = curl(bundle, "https://internal.partner.example/v1/x")
		if err == nil || !strings.Contains(err.Error(), "CONNECT tunnel failed, response 403") {
			t.Errorf("internal: %v, want the CONNECT refused with 403 by the SSRF guard", err)
		}
		if line := tunnelLine(t, egretLog, "internal.partner.example:443"); line["status"] != float64(403) || line["intercepted"] != nil {
			t.Errorf("line %v", line)
		}
		if count() != n {
			t.Errorf("a denied destination reached the origin")
		}
	})

	// The credential is in no line egret wrote.
	time.Sleep(200 * time.Millisecond)
	b, err := os.ReadFile(egretLog)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), interceptSecret) || strings.Contains(string(b), "secret-query") {
		t.Errorf("egret's output holds the credential or a query string:\n%s", b)
	}
	if !strings.Contains(string(b), `"kind":"intercept"`) {
		t.Errorf("no per-request intercept line in egret's output")
	}
}

// tunnelLine returns the last tunnel line for dest (not the lines of the
// requests inside it), waiting for it: a tunnel is logged when it ends,
// which may be just after the client has its answer.
func tunnelLine(t *testing.T, path, dest string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines := logLines(t, path)
		for i := len(lines) - 1; i >= 0; i-- {
			if lines[i]["dest"] == dest && lines[i]["msg"] == "tunnel" {
				return lines[i]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tunnel line for %s", dest)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// interceptDocExample returns the gateway configuration of
// docs/interception.md.
func interceptDocExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/interception.md")
	if err != nil {
		t.Fatal(err)
	}
	const mark = "This is the file `test/e2e/intercept_test.go` applies (with its paths moved under a temporary directory):\n\n```yaml\n"
	doc := string(b)
	i := strings.Index(doc, mark)
	if i < 0 {
		t.Fatal("docs/interception.md: the gateway configuration example is gone")
	}
	block := doc[i+len(mark):]
	return block[:strings.Index(block, "```")]
}

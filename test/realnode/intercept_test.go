package realnode

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/realnode"
	"egret.io/egret/internal/testutil/squid"
)

// The intercepting gateway of deploy/overlays/intercept on a real node, as
// docs/interception.md installs it: the CA Secret by the documented
// command, the overlay under the documented origin-CA overlay (the
// outside origin's certificate is signed by a CA of its own), the
// documented EgressPolicy agents and its Secret openai in shop (the
// token's value the test's own). From a pod the policy selects, each real
// runtime — curl, Python requests, Node.js fetch, Java HttpClient, Ruby
// Net::HTTP, Go — sends a credential of its own over HTTPS:
//
//   - the request succeeds, trusting egret's interception CA through the
//     injected bundle (the image is unchanged);
//   - the origin receives the Secret's credential, not the pod's;
//   - a path the rules do not allow is answered 403 with egret's
//     Proxy-Status, and never reaches the origin;
//   - a pod the policy does not select gets an opaque tunnel: it sees the
//     origin's own certificate, the origin its own credential;
//   - a pod in sidecar mode gets the same (the sidecar never terminates
//     TLS: the gateway intercepts its tunnel);
//   - the interception CA rotates through the kubelet's Secret volume
//     (announce, switch) with no restart, and new processes of the running
//     pod trust the new leaves;
//   - the credential is in no gateway log and no pod spec;
//   - a new value of the Secret serves the next requests, no restart.
//   - behind a corporate proxy that intercepts TLS too (Squid ssl-bump as
//     the gateway's upstream, its CA in origin-ca.crt), the same.
func TestInterceptOverlay(t *testing.T) {
	n := realnode.Get(t)
	image := n.RuntimesImage(t)
	root := repoRoot(t)
	dir := t.TempDir()
	out := n.NewOutside(t)
	const host = "api.openai.example"
	org := newInterceptOrigin(t, out, dir, host)
	if err := n.AddHost(host, out.IP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	step := func(name string) { t.Logf("%s done at %s", name, time.Since(start).Round(time.Second)) }

	// The interception CA, constrained to the site's domain, as the
	// documented command's ca.crt and ca.key.
	caPEM, keyPEM, err := intercept.GenerateCA("egret interception CA", 24*time.Hour, []string{"openai.example"})
	if err != nil {
		t.Fatal(err)
	}
	// The corporate proxy that the gateway is put behind at the end
	// (behind-ssl-bump): its CA goes in origin-ca.crt beside the origin's,
	// as a gateway behind a proxy that intercepts TLS needs.
	corpPEM, corpKey, err := intercept.GenerateCA("corp ssl-bump CA", 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"ca.crt": caPEM, "ca.key": keyPEM, "origin-ca.crt": append(append([]byte{}, org.caPEM...), corpPEM...)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The documented overlay on top of deploy/overlays/intercept.
	overlay, err := filepath.Rel(dir, filepath.Join(root, "deploy/overlays/intercept"))
	if err != nil {
		t.Fatal(err)
	}
	kust := docBlock(t, "docs/interception.md", "intercept-origin-ca")
	if !strings.Contains(kust, "\n- ../intercept\n") {
		t.Fatalf("docs/interception.md's origin-CA overlay does not build on ../intercept:\n%s", kust)
	}
	kust = strings.Replace(kust, "\n- ../intercept\n", "\n- "+overlay+"\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	manifests := n.KubectlT(t, "kustomize", dir)
	if err := os.WriteFile(filepath.Join(dir, "egret.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	// An earlier test's install (TestHelm's, say) may still be going.
	n.KubectlCmd(context.Background(), "wait", "--for=delete", "namespace/egret-system", "--timeout=3m").Run()
	n.KubectlT(t, "create", "namespace", "egret-system")
	t.Cleanup(func() { uninstall(t, n, dir) })
	if o, err := shell(t, n, dir, docBlock(t, "docs/interception.md", "intercept-ca-secret")); err != nil {
		t.Fatalf("the documented CA Secret: %v\n%s", err, o)
	}
	// The origin's network is not global unicast: the SSRF guard refuses
	// it unless allowed.
	n.KubectlT(t, "create", "secret", "generic", "egret-upstream", "-n", "egret-system",
		"--from-literal=EGRET_SSRF_ALLOW_CIDRS="+out.IP+"/32")
	// shop holds the grant's Role: it exists before the install. An
	// earlier test's shop (TestGatewayInstall) may still be terminating.
	n.KubectlCmd(context.Background(), "wait", "--for=delete", "namespace/shop", "--timeout=2m").Run()
	ns := namespace(t, n, "shop", map[string]string{"egret.io/inject": "enabled"})
	if o, err := shell(t, n, dir, "kubectl apply --server-side -f egret.yaml"); err != nil {
		t.Fatalf("install: %v\n%s", err, o)
	}
	for _, d := range []string{"egret-webhook", "egret-gateway"} {
		n.KubectlT(t, "rollout", "status", "-n", "egret-system", "deployment/"+d, "--timeout=3m")
	}
	n.KubectlT(t, "wait", "-n", "egret-system", "--for=condition=Available", "deployment", "--all", "--timeout=3m")
	step("install")

	// The gateway publishes its CA; the webhook puts it in shop's bundle.
	lines := strings.Split(strings.TrimSpace(string(caPEM)), "\n")
	marker := lines[len(lines)/2]
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		cm, err := n.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), "egret-trust-bundle", metav1.GetOptions{})
		if err == nil && strings.Contains(cm.Data["ca-bundle.pem"], marker) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the interception CA is not in %s's trust bundle: %v\n%s\n%s", ns, err,
				n.KubectlT(t, "get", "configmap", "-n", "egret-system", "egret-intercept-ca", "-o", "yaml"),
				n.KubectlT(t, "logs", "-n", "egret-system", "deployment/egret-webhook", "--tail=30"))
		}
	}
	step("trust bundle")

	// The documented policy and Secret, the token's value the test's.
	token := "sk-realnode-" + fmt.Sprint(time.Now().UnixNano())
	secret := docBlock(t, "docs/interception.md", "intercept-policy-secret")
	if !strings.Contains(secret, "token: sk-...") {
		t.Fatalf("docs/interception.md's Secret has no token: sk-...:\n%s", secret)
	}
	for name, data := range map[string]string{
		"policy.yaml": docBlock(t, "docs/interception.md", "intercept-policy"),
		"secret.yaml": strings.Replace(secret, "token: sk-...", "token: "+token, 1),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n.KubectlT(t, "apply", "-f", filepath.Join(dir, "secret.yaml"), "-f", filepath.Join(dir, "policy.yaml"))

	agent := interceptPod(t, n, ns, "agent-1", image, map[string]string{"app": "agent"}, realnode.Runtimes)
	other := interceptPod(t, n, ns, "other", image, nil, []string{"curl"})
	// Sidecar mode: the runtimes reach egret's sidecar, which sends the
	// site to the gateway as an opaque CONNECT (it never terminates TLS).
	side := interceptPod(t, n, ns, "agent-sidecar", image, map[string]string{"app": "agent"}, []string{"curl", "python"}, "egret.io/mode", "sidecar")
	if len(side.Spec.InitContainers) == 0 || side.Spec.InitContainers[0].Name != "egret-proxy" {
		t.Fatalf("sidecar mode: init containers %+v", side.Spec.InitContainers)
	}
	for _, c := range agent.Spec.Containers {
		if v, _ := envOf(c, "HTTPS_PROXY"); !strings.Contains(v, "egret-gateway") {
			t.Fatalf("container %s not injected with the gateway: %v", c.Name, c.Env)
		}
		if v, _ := envOf(c, "SSL_CERT_FILE"); v != "/etc/egret/trust/ca-bundle.pem" {
			t.Fatalf("container %s not injected with the CA bundle: %v\npod annotations %v\n%s\n%s", c.Name, c.Env, agent.Annotations,
				n.KubectlT(t, "get", "configmap", "-n", ns, "egret-trust-bundle", "-o", "jsonpath={.metadata}"),
				n.KubectlT(t, "logs", "-n", "egret-system", "-l", "app.kubernetes.io/name=egret-webhook", "--tail=40", "--prefix"))
		}
	}
	step("pods")

	// The gateway learns the policy, the Secret and the pod's address
	// from its watches: wait for the first injected request.
	var last string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		path := fmt.Sprintf("/v1/models/ready-%d", time.Now().UnixNano())
		status, o, _ := request(n, ns, agent.Name, "curl", "https://"+host+path, "GET", "")
		if status == 200 && org.auth(path) == "Bearer "+token {
			break
		}
		last = fmt.Sprintf("status %d, origin saw %q\n%s", status, redact(org.auth(path), token), o)
		if time.Now().After(deadline) {
			t.Fatalf("no injected request through the gateway in 90 s: %s\n%s", last, gatewayLogs(t, n))
		}
	}
	step("policy in force")

	for _, rt := range realnode.Runtimes {
		t.Run(rt, func(t *testing.T) {
			own := "Authorization: Bearer pod-own-" + rt
			path := "/v1/models/" + rt
			status, o, err := request(n, ns, agent.Name, rt, "https://"+host+path, "GET", own)
			switch {
			case err != nil || status != 200:
				t.Errorf("GET %s: status %d, %v (want 200: egret's leaf trusted through the injected bundle)\n%s", path, status, err, o)
			case org.auth(path) != "Bearer "+token:
				t.Errorf("GET %s: the origin received Authorization %q, want the Secret's credential", path, redact(org.auth(path), token))
			}
			path = "/admin/" + rt
			status, o, err = request(n, ns, agent.Name, rt, "https://"+host+path, "POST", own)
			if err != nil || status != 403 {
				t.Errorf("POST %s: status %d, %v (want 403: the rules allow /v1 only)\n%s", path, status, err, o)
			}
			if org.seen(path) {
				t.Errorf("POST %s reached the origin", path)
			}
		})
	}
	step("runtimes")

	// egret's answer to a denied request, as curl sees it.
	t.Run("denied-proxy-status", func(t *testing.T) {
		for _, c := range []struct{ method, path, rule string }{{"DELETE", "/v1/files/f-1", "(rule 1)"}, {"POST", "/admin", "(default)"}} {
			o, err := n.KubectlCmd(context.Background(), "exec", "-n", ns, agent.Name, "-c", "curl", "--",
				"curl", "-sS", "--max-time", "20", "-o", "/dev/null", "-D", "-", "-X", c.method, "https://"+host+c.path).CombinedOutput()
			// The proxy's "200 Connection established", then egret's answer
			// inside the tunnel.
			if err != nil || !regexp.MustCompile(`(?m)^HTTP/\S+ 403`).Match(o) ||
				!strings.Contains(strings.ToLower(string(o)), "proxy-status: egret; error=http_request_denied") ||
				!strings.Contains(string(o), c.rule) {
				t.Errorf("%s %s: %v, want 403 with egret's Proxy-Status:\n%s", c.method, c.path, err, o)
			}
			if org.seen(c.path) {
				t.Errorf("%s %s reached the origin", c.method, c.path)
			}
		}
	})

	// A pod the policy does not select: an opaque tunnel. curl -k shows
	// the certificate it got: the origin's own; the origin gets the pod's
	// credential.
	t.Run("opaque-tunnel", func(t *testing.T) {
		path := "/v1/opaque"
		o, err := n.KubectlCmd(context.Background(), "exec", "-n", ns, other.Name, "-c", "curl", "--",
			"curl", "-sSvk", "--max-time", "20", "-o", "/dev/null", "-H", "Authorization: Bearer pod-own-other", "https://"+host+path).CombinedOutput()
		if err != nil {
			t.Fatalf("opaque tunnel: %v\n%s", err, o)
		}
		if !strings.Contains(string(o), "issuer: CN="+host) || strings.Contains(string(o), "egret interception CA") {
			t.Errorf("the pod the policy does not select did not see the origin's own certificate:\n%s", o)
		}
		if got := org.auth(path); got != "Bearer pod-own-other" {
			t.Errorf("the origin received %q through the opaque tunnel, want the pod's own credential", redact(got, token))
		}
	})

	// Sidecar mode: the gateway knows the pod by its address (the
	// sidecar's connections come from it) and intercepts the same way.
	t.Run("sidecar-mode", func(t *testing.T) {
		for _, rt := range []string{"curl", "python"} {
			path := "/v1/sidecar/" + rt
			status, o, err := request(n, ns, side.Name, rt, "https://"+host+path, "GET", "Authorization: Bearer pod-own-sidecar")
			if err != nil || status != 200 || org.auth(path) != "Bearer "+token {
				t.Errorf("%s through the sidecar: status %d, %v, the origin saw %q, want 200 with the Secret's credential\n%s",
					rt, status, err, redact(org.auth(path), token), o)
			}
		}
		if status, o, _ := request(n, ns, side.Name, "curl", "https://"+host+"/admin/sidecar", "POST", ""); status != 403 {
			t.Errorf("POST /admin through the sidecar: status %d, want 403\n%s", status, o)
		}
	})

	// The interception CA rotates as docs/interception.md says, through
	// the real kubelet's Secret volume: announce (trust.crt: the new CA;
	// the gateway publishes both, the webhook puts both in the bundle, the
	// kubelet updates the running pod's files), then switch (the new CA
	// signs, the old one in trust.crt). New processes of the running pod
	// trust the new leaves; no restart.
	t.Run("ca-rotation", func(t *testing.T) {
		ctx := context.Background()
		ca2PEM, key2PEM, err := intercept.GenerateCA("egret interception CA 2", 24*time.Hour, []string{"openai.example"})
		if err != nil {
			t.Fatal(err)
		}
		setCA := func(data map[string][]byte) {
			s, err := n.Client.CoreV1().Secrets("egret-system").Get(ctx, "egret-intercept-ca", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.Data = data
			if _, err := n.Client.CoreV1().Secrets("egret-system").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		rot := time.Now()
		setCA(map[string][]byte{"tls.crt": caPEM, "tls.key": keyPEM, "trust.crt": ca2PEM})
		l2 := strings.Split(strings.TrimSpace(string(ca2PEM)), "\n")
		marker2 := l2[len(l2)/2]
		for {
			b, _ := n.KubectlCmd(ctx, "exec", "-n", ns, agent.Name, "-c", "curl", "--", "cat", "/etc/egret/trust/ca-bundle.pem").Output()
			if strings.Contains(string(b), marker2) && strings.Contains(string(b), marker) {
				break
			}
			if time.Since(rot) > 2*time.Minute {
				t.Fatalf("announce: the running pod's bundle lacks both CAs after %s", time.Since(rot).Round(time.Second))
			}
			time.Sleep(2 * time.Second)
		}
		t.Logf("announce: both CAs in the running pod's bundle %s after the Secret's update", time.Since(rot).Round(time.Second))
		sw := time.Now()
		setCA(map[string][]byte{"tls.crt": ca2PEM, "tls.key": key2PEM, "trust.crt": caPEM})
		for i := 0; ; i++ {
			o, err := n.KubectlCmd(ctx, "exec", "-n", ns, agent.Name, "-c", "curl", "--",
				"curl", "-sSv", "--max-time", "20", "-o", "/dev/null", fmt.Sprintf("https://%s/v1/switch-%d", host, i)).CombinedOutput()
			if err == nil && strings.Contains(string(o), "egret interception CA 2") {
				break
			}
			if time.Since(sw) > 90*time.Second {
				t.Fatalf("switch: the gateway does not sign with the new CA after %s: %v\n%s", time.Since(sw).Round(time.Second), err, o)
			}
			time.Sleep(time.Second)
		}
		t.Logf("switch: leaves of the new CA %s after the Secret's update", time.Since(sw).Round(time.Second))
		for _, rt := range []string{"python", "node", "java", "go"} {
			path := "/v1/switched/" + rt
			if status, o, err := request(n, ns, agent.Name, rt, "https://"+host+path, "GET", ""); err != nil || status != 200 {
				t.Errorf("%s after the switch: status %d, %v\n%s", rt, status, err, o)
			}
		}
		noRestarts(t, n, "egret-system", "app.kubernetes.io/name=egret-gateway")
	})
	step("ca rotation")

	// Rotation: the Secret's new value serves the next requests.
	var token2 string
	t.Run("rotation", func(t *testing.T) {
		ctx := context.Background()
		token2 = "sk-realnode-rotated-" + fmt.Sprint(time.Now().UnixNano())
		s, err := n.Client.CoreV1().Secrets(ns).Get(ctx, "openai", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data["token"] = []byte(token2)
		if _, err := n.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rot := time.Now()
		for i := 0; ; i++ {
			path := fmt.Sprintf("/v1/rotated-%d", i)
			status, o, _ := request(n, ns, agent.Name, "curl", "https://"+host+path, "GET", "")
			if status == 200 && org.auth(path) == "Bearer "+token2 {
				break
			}
			if time.Since(rot) > time.Minute {
				t.Fatalf("the rotated credential is not in use after %s: status %d, the origin saw %q\n%s", time.Since(rot).Round(time.Second),
					status, redact(redact(org.auth(path), token), token2), o)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("the rotated credential served requests %s after the Secret's update", time.Since(rot).Round(100*time.Millisecond))
		for _, rt := range []string{"python", "java"} {
			path := "/v1/rotated/" + rt
			if status, o, err := request(n, ns, agent.Name, rt, "https://"+host+path, "GET", ""); err != nil || status != 200 || org.auth(path) != "Bearer "+token2 {
				t.Errorf("%s after the rotation: status %d, %v, the origin saw %q\n%s", rt, status, err, redact(redact(org.auth(path), token), token2), o)
			}
		}
		noRestarts(t, n, "egret-system", "app.kubernetes.io/name=egret-gateway")
	})
	step("rotation")

	// Behind a corporate proxy that intercepts TLS too (Squid ssl-bump,
	// the gateway's upstream from its Secret, read without a restart): the
	// gateway verifies Squid's leaf with origin-ca.crt, injects the
	// credential, and the request goes gateway → Squid → origin.
	t.Run("behind-ssl-bump", func(t *testing.T) {
		sq := squid.Start(t, squid.Options{Namespace: out.NS, Listen: out.IP + ":3128", Hosts: map[string]string{host: out.IP},
			Bump: &squid.Bump{CACert: corpPEM, CAKey: corpKey, OriginCAFile: filepath.Join(dir, "origin-ca.crt")}})
		upstream := n.KubectlT(t, "create", "secret", "generic", "egret-upstream", "-n", "egret-system", "--dry-run=client", "-o", "yaml",
			"--from-literal=EGRET_SSRF_ALLOW_CIDRS="+out.IP+"/32", "--from-literal=UPSTREAM_PROXY=http://"+sq.Addr)
		if err := os.WriteFile(filepath.Join(dir, "upstream.yaml"), []byte(upstream), 0o600); err != nil {
			t.Fatal(err)
		}
		n.KubectlT(t, "apply", "-f", filepath.Join(dir, "upstream.yaml"))
		start := time.Now()
		for i := 0; ; i++ {
			path := fmt.Sprintf("/v1/bumped-%d", i)
			status, o, _ := request(n, ns, agent.Name, "curl", "https://"+host+path, "GET", "")
			if status == 200 && org.auth(path) == "Bearer "+token2 && squidSaw(sq, "https://"+host+path) {
				break
			}
			if time.Since(start) > 90*time.Second {
				t.Fatalf("no injected request through Squid after %s: status %d, the origin saw %q\n%s\n%s", time.Since(start).Round(time.Second),
					status, redact(redact(org.auth(path), token), token2), o, strings.Join(sq.AccessLog(), "\n"))
			}
			time.Sleep(time.Second)
		}
		t.Logf("gateway → Squid ssl-bump → origin %s after the upstream Secret's update", time.Since(start).Round(time.Second))
		for _, rt := range []string{"python", "java"} {
			path := "/v1/bumped/" + rt
			if status, o, err := request(n, ns, agent.Name, rt, "https://"+host+path, "GET", ""); err != nil || status != 200 || org.auth(path) != "Bearer "+token2 {
				t.Errorf("%s behind Squid: status %d, %v, the origin saw %q\n%s", rt, status, err, redact(redact(org.auth(path), token), token2), o)
			}
		}
	})

	// The credential is in no log of the gateways and in no pod spec the
	// kubelet runs; the logs do name it (they are the lines we mean).
	t.Run("no-credential-in-logs-or-specs", func(t *testing.T) {
		logs := gatewayLogs(t, n)
		if !strings.Contains(logs, `"intercepted":true`) || !strings.Contains(logs, ns+"/openai") {
			t.Errorf("the gateways' logs have no intercepted tunnel naming the credential %s/openai:\n%s", ns, logs)
		}
		specs := n.KubectlT(t, "get", "pods", "-A", "-o", "yaml")
		for _, v := range []string{token, token2} {
			if v == "" {
				continue
			}
			if strings.Contains(logs, v) {
				t.Errorf("a gateway log holds the credential")
			}
			if strings.Contains(specs, v) {
				t.Errorf("a pod spec holds the credential")
			}
		}
		if strings.Contains(logs, "pod-own-") {
			t.Errorf("a gateway log holds a pod's own credential")
		}
	})
}

// interceptOrigin is an HTTPS origin in the outside namespace (out.IP:443)
// whose certificate for host is its own CA (caPEM); it records the
// Authorization header of every request by path and answers 200.
type interceptOrigin struct {
	caPEM []byte
	mu    sync.Mutex
	got   map[string]string // path → Authorization
}

func newInterceptOrigin(t testing.TB, out *realnode.Outside, dir, host string) *interceptOrigin {
	t.Helper()
	cert, caFile := testutil.SelfSigned(t, dir, host)
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	o := &interceptOrigin{caPEM: caPEM, got: map[string]string{}}
	ln, err := out.Listen("tcp", out.IP+":443")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.got[r.URL.Path] = r.Header.Get("Authorization")
		o.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.URL.Path})
	})}
	go srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}))
	t.Cleanup(func() { srv.Close() })
	return o
}

// auth is the Authorization the origin received for path ("" if none).
func (o *interceptOrigin) auth(path string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.got[path]
}

// seen says whether a request for path reached the origin.
func (o *interceptOrigin) seen(path string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.got[path]
	return ok
}

// redact hides secret in s (a failure message must not print it).
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[credential]")
}

// interceptPod creates a pod with a container per runtime of runtimes (the
// runtimes image, sleeping), labels and annotations (name, value, ...)
// and returns it once Ready.
func interceptPod(t testing.TB, n *realnode.Node, ns, name, image string, labels map[string]string, runtimes []string, annotations ...string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: map[string]string{}}}
	for i := 0; i+1 < len(annotations); i += 2 {
		p.Annotations[annotations[i]] = annotations[i+1]
	}
	p.Spec.TerminationGracePeriodSeconds = new(int64)
	for _, rt := range runtimes {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: rt, Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}})
	}
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if _, err = n.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create pod %s/%s: %v", ns, name, err)
		}
	}
	return waitPodReady(t, n, ns, name, 2*time.Minute)
}

// request runs the runtime's client in its container with a method and a
// header and returns the status (0 when none), the output and the
// client's error.
func request(n *realnode.Node, ns, pod, runtime, url, method, header string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"exec", "-n", ns, pod, "-c", runtime, "--"}, realnode.RuntimeRequest(runtime, url, method, header)...)
	cmd := n.KubectlCmd(ctx, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	o := string(b) + stderr.String()
	status := 0
	first, _, _ := strings.Cut(string(b), "\n")
	fmt.Sscan(strings.TrimSpace(first), &status)
	return status, o, err
}

// gatewayLogs are the logs of every gateway pod.
func gatewayLogs(t testing.TB, n *realnode.Node) string {
	t.Helper()
	o, _ := n.KubectlCmd(context.Background(), "logs", "-n", "egret-system", "-l", "app.kubernetes.io/name=egret-gateway",
		"--tail=-1", "--prefix", "--max-log-requests=10").CombinedOutput()
	return string(o)
}

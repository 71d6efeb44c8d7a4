package realnode

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/echo"
	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/noproxy"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/realnode"
)

// The real runtimes — curl, Python requests, Node.js fetch, Java
// HttpClient, Ruby Net::HTTP, Go net/http — each in a container of its
// own, with exactly what the webhook of the shipped trust install
// (deploy/overlays/trust: the default gateway mode plus trusted CAs)
// injected, behind a corporate proxy that intercepts TLS (egret's
// interception engine, as an upstream outside the cluster, signing with
// the corporate CA that the platform team puts in ConfigMap corp-ca):
//
//   - env-variable mode: an outside origin goes through the gateway (the
//     upstream sees a gateway pod as its client), a ClusterIP Service by
//     its FQDN and a pod IP go direct (they see the client pod);
//   - trusted CAs: HTTPS to the outside origin is intercepted and each
//     runtime trusts the leaf through the bundle egret injected, with no
//     change to the image; the same image in a pod without the CA
//     (egret.io/inject-ca: "false") refuses the certificate.
func TestRuntimesEnvAndTrust(t *testing.T) {
	n := realnode.Get(t)
	image := n.RuntimesImage(t)
	root := repoRoot(t)
	dir := t.TempDir()
	out := n.NewOutside(t)
	originCA := originWithCA(t, out, dir)
	// origin.example is a site the corporate proxy intercepts (HTTPS);
	// plain.example (the same origin) is not: plain HTTP in a tunnel to a
	// site fails at the interceptor, and Node's fetch tunnels plain HTTP.
	for _, h := range []string{"origin.example", "plain.example"} {
		if err := n.AddHost(h, out.IP); err != nil {
			t.Fatal(err)
		}
	}

	// The corporate intercepting proxy: its CA is the corporate CA.
	caPEM, keyPEM, err := intercept.GenerateCA("corp interception CA", 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	upLog := interceptingUpstream(t, n, out, dir, caPEM, keyPEM, originCA)

	// The install: the corporate CA where deploy/components/trust reads
	// it, the gateway's upstream and SSRF allowance in its Secret, then
	// the trust overlay rendered and applied as the docs say.
	manifests := n.KubectlT(t, "kustomize", filepath.Join(root, "deploy/overlays/trust"))
	if err := os.WriteFile(filepath.Join(dir, "egret.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	n.KubectlT(t, "create", "namespace", "egret-system")
	t.Cleanup(func() { uninstall(t, n, dir) })
	caFile := filepath.Join(dir, "corp-root.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	n.KubectlT(t, "create", "configmap", "corp-ca", "-n", "egret-system", "--from-file=trust-bundle.pem="+caFile)
	n.KubectlT(t, "create", "secret", "generic", "egret-upstream", "-n", "egret-system",
		"--from-literal=EGRET_SSRF_ALLOW_CIDRS="+out.IP+"/32", "--from-literal=UPSTREAM_PROXY=http://"+out.IP+":3128")
	if o, err := shell(t, n, dir, "kubectl apply --server-side -f egret.yaml"); err != nil {
		t.Fatalf("install: %v\n%s", err, o)
	}
	n.KubectlT(t, "wait", "-n", "egret-system", "--for=condition=Available", "deployment", "--all", "--timeout=3m")
	n.KubectlT(t, "rollout", "status", "-n", "egret-system", "deployment/egret-webhook", "--timeout=3m")
	n.KubectlT(t, "rollout", "status", "-n", "egret-system", "deployment/egret-gateway", "--timeout=3m")
	gateways := podIPs(t, n, "egret-system", "app.kubernetes.io/name=egret-gateway")

	// A Service and its pod, in a namespace egret does not inject.
	svcNS := namespace(t, n, "runtimes-svc", nil)
	n.KubectlT(t, "create", "deployment", "-n", svcNS, "echo", "--image="+realnode.EgretImage, "--port=8080", "--", "/egret", "echo")
	n.KubectlT(t, "expose", "deployment", "-n", svcNS, "echo", "--port=8080")
	n.KubectlT(t, "wait", "-n", svcNS, "--for=condition=Available", "deployment/echo", "--timeout=2m")
	echoIPs := podIPs(t, n, svcNS, "app=echo")
	if len(echoIPs) != 1 {
		t.Fatalf("echo pods: %v", echoIPs)
	}

	// The opted-in namespace; its pods are created once egret's trust
	// bundle is there (before it, pods get no CA, with a warning).
	ns := namespace(t, n, "runtimes", map[string]string{"egret.io/inject": "enabled"})
	waitTrustBundle(t, n, ns)
	pod := runtimesPod(t, n, ns, "clients", image, nil)
	noCA := runtimesPod(t, n, ns, "clients-noca", image, map[string]string{"egret.io/inject-ca": "false"})
	// Sidecar mode: the runtimes reach egret's sidecar, the sidecar the
	// gateway; the sidecar checks the mounted bundle before it starts.
	side := runtimesPod(t, n, ns, "clients-sidecar", image, map[string]string{"egret.io/mode": "sidecar"})
	if len(side.Spec.InitContainers) < 2 || side.Spec.InitContainers[0].Name != "egret-proxy" {
		t.Fatalf("sidecar mode: init containers %+v", side.Spec.InitContainers)
	}
	for _, c := range pod.Spec.Containers {
		if v, _ := envOf(c, "HTTP_PROXY"); !strings.Contains(v, "egret-gateway") {
			t.Fatalf("container %s not injected with the gateway: %v", c.Name, c.Env)
		}
		if v, _ := envOf(c, "SSL_CERT_FILE"); v != "/etc/egret/trust/ca-bundle.pem" {
			t.Fatalf("container %s not injected with the CA bundle: %v", c.Name, c.Env)
		}
	}
	for _, c := range pod.Spec.Containers {
		if v, _ := envOf(c, "JAVA_TOOL_OPTIONS"); c.Name == "java" && (!strings.HasPrefix(v, "-XX:+UseSerialGC -Xss1m -D") ||
			!strings.Contains(v, "-Dhttps.proxyHost=") || !strings.Contains(v, "-Djavax.net.ssl.trustStore=/etc/egret/trust/truststore.p12")) {
			t.Errorf("java: JAVA_TOOL_OPTIONS=%q: want the container's own options with egret's appended", v)
		}
	}
	for _, c := range noCA.Spec.Containers {
		if _, ok := envOf(c, "SSL_CERT_FILE"); ok {
			t.Fatalf("container %s of the pod without the CA has SSL_CERT_FILE: %v", c.Name, c.Env)
		}
	}

	svcURL := "http://echo." + svcNS + ".svc.cluster.local:8080/"
	svcShortURL := "http://echo." + svcNS + ".svc:8080/"
	podURL := "http://" + echoIPs[0] + ":8080/"
	svc, err := n.Client.CoreV1().Services(svcNS).Get(context.Background(), "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clusterIPURL := "http://" + svc.Spec.ClusterIP + ":8080/"
	table := []string{"| runtime (egret's model) | HTTP outside | HTTPS outside, injected CA | HTTPS outside, no CA | Service FQDN | name.ns.svc | ClusterIP | pod IP | sidecar mode: HTTP / HTTPS outside |", "|---|---|---|---|---|---|---|---|---|"}
	for _, rt := range realnode.Runtimes {
		t.Run(rt, func(t *testing.T) {
			model, ok := noproxy.ClientByName(runtimeModels[rt])
			if !ok {
				t.Fatalf("egret has no NO_PROXY model %s", runtimeModels[rt])
			}
			env := noproxy.Env{}
			for _, c := range pod.Spec.Containers {
				if c.Name == rt {
					for _, e := range c.Env {
						env[e.Name] = e.Value
					}
				}
			}
			// predict is what egret's model of the runtime says it does.
			predict := func(u string) string {
				res, err := noproxy.Explain(u, env, []noproxy.Client{model})
				if err != nil || len(res) != 1 {
					t.Fatalf("egret's model on %s: %v", u, err)
				}
				return res[0].Decision.String()
			}
			row := map[string]string{}
			// HTTP to the outside: through a gateway replica to the
			// upstream (which the origin sees), as egret promises.
			u := "http://plain.example/" + rt + "/http"
			mark := len(upLog.String())
			if p := predict(u); p != "proxy" {
				t.Errorf("egret's model predicts %s for %s, want proxy", p, u)
			}
			r, o, err := fetch(n, ns, "clients", rt, u)
			switch {
			case err != nil:
				t.Errorf("HTTP outside: %v\n%s", err, o)
				row["http"] = "FAIL: " + err.Error()
			case r.RemoteIP != out.IP || r.Path != "/"+rt+"/http":
				t.Errorf("HTTP outside reached the origin from %s (path %s), not through the upstream %s", r.RemoteIP, r.Path, out.IP)
				row["http"] = "FAIL: from " + r.RemoteIP
			default:
				client := upstreamClient(upLog, mark, u, "plain.example:80")
				if !slices.Contains(gateways, client) {
					t.Errorf("the upstream's line for %s has client %q, not a gateway %v\n%s", u, client, gateways, upLog.String()[mark:])
					row["http"] = "FAIL: upstream client " + client
				} else {
					row["http"] = "proxy: gateway → upstream"
				}
			}
			// The runtimes that need more than HTTP_PROXY: without the
			// switch egret injects for them, they go direct (the pod may
			// reach the outside here), which is why egret injects it.
			if sw := runtimeSwitch[rt]; sw != "" {
				r, o, err := fetch(n, ns, "clients", rt, "http://plain.example/"+rt+"/without", sw)
				if err != nil || r.RemoteIP != pod.Status.PodIP {
					t.Errorf("HTTP outside without %s: %v (origin saw %s), want direct from the pod %s\n%s", sw, err, r.RemoteIP, pod.Status.PodIP, o)
					row["http"] += "; FAIL without " + sw
				} else {
					row["http"] += "; direct without " + sw
				}
			}
			// HTTPS to the outside: intercepted by the upstream, trusted
			// through the injected bundle.
			path := "/" + rt + "/https"
			mark = len(upLog.String())
			r, o, err = fetch(n, ns, "clients", rt, "https://origin.example"+path)
			switch {
			case err != nil:
				t.Errorf("HTTPS outside with the injected CA: %v\n%s", err, o)
				row["https"] = "FAIL: " + err.Error()
			case r.RemoteIP != out.IP || !r.TLS || r.Path != path:
				t.Errorf("HTTPS outside reached the origin from %s (tls %v, path %s), want the upstream %s", r.RemoteIP, r.TLS, r.Path, out.IP)
				row["https"] = "FAIL: from " + r.RemoteIP
			case !intercepted(upLog, mark, path):
				t.Errorf("the upstream did not intercept %s:\n%s", path, upLog.String()[mark:])
				row["https"] = "FAIL: not intercepted"
			default:
				row["https"] = "intercepted, trusted"
			}
			// The same without the CA: the corporate leaf is refused.
			_, o, err = fetch(n, ns, "clients-noca", rt, "https://origin.example/"+rt+"/noca")
			switch {
			case err == nil:
				t.Errorf("HTTPS outside without the CA succeeded: the runtime trusts the interception CA without egret\n%s", o)
				row["noca"] = "FAIL: trusted"
			case !regexp.MustCompile(`(?i)certificate|PKIX|x509`).MatchString(o):
				t.Errorf("HTTPS outside without the CA failed, but not on the certificate: %v\n%s", err, o)
				row["noca"] = "FAIL: " + err.Error()
			default:
				row["noca"] = "refused (certificate)"
			}
			// The Service by FQDN and by name.namespace.svc (egret
			// promises direct for every runtime), its ClusterIP and the
			// pod IP (as egret's model of the runtime says: a runtime
			// without CIDR entries sends them to the gateway, which
			// reaches them).
			for _, c := range []struct{ key, url string }{{"svc", svcURL}, {"svcshort", svcShortURL}, {"clusterip", clusterIPURL}, {"podip", podURL}} {
				want := predict(c.url)
				if (c.key == "svc" || c.key == "svcshort") && want != "direct" {
					t.Errorf("egret's model predicts %s for %s, want direct", want, c.url)
				}
				r, o, err := fetch(n, ns, "clients", rt, c.url)
				got := "?"
				switch {
				case err != nil:
					t.Errorf("%s: %v\n%s", c.url, err, o)
					row[c.key] = "FAIL: " + err.Error()
					continue
				case r.RemoteIP == pod.Status.PodIP:
					got = "direct"
				case slices.Contains(gateways, r.RemoteIP):
					got = "proxy"
				}
				if got != want {
					t.Errorf("%s: the server saw %s (%s), egret's model predicts %s (client pod %s, gateways %v)", c.url, r.RemoteIP, got, want, pod.Status.PodIP, gateways)
					row[c.key] = "FAIL: " + got + ", predicted " + want
				} else {
					row[c.key] = got + " (as predicted)"
				}
			}
			// Sidecar mode: the same outside verdicts through the sidecar.
			row["side"] = "ok"
			u = "http://plain.example/" + rt + "/sidecar"
			mark = len(upLog.String())
			r, o, err = fetch(n, ns, "clients-sidecar", rt, u)
			if err != nil || r.RemoteIP != out.IP || !slices.Contains(gateways, upstreamClient(upLog, mark, u, "plain.example:80")) {
				t.Errorf("sidecar mode, HTTP outside: %v (origin saw %s), want sidecar → gateway → upstream\n%s\n%s", err, r.RemoteIP, o, upLog.String()[mark:])
				row["side"] = "FAIL"
			}
			path = "/" + rt + "/sidecar-https"
			mark = len(upLog.String())
			r, o, err = fetch(n, ns, "clients-sidecar", rt, "https://origin.example"+path)
			if err != nil || r.RemoteIP != out.IP || !r.TLS || !intercepted(upLog, mark, path) {
				t.Errorf("sidecar mode, HTTPS outside: %v (origin saw %s), want intercepted and trusted\n%s", err, r.RemoteIP, o)
				row["side"] = "FAIL"
			}
			if row["side"] == "ok" {
				row["side"] = "gateway → upstream / intercepted, trusted"
			}
			table = append(table, fmt.Sprintf("| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s |", rt, model.Name, row["http"], row["https"], row["noca"],
				row["svc"], row["svcshort"], row["clusterip"], row["podip"], row["side"]))
		})
	}
	t.Logf("per-runtime verdicts:\n%s", strings.Join(table, "\n"))

	// The corporate CA rotates: the source holds the new CA only, egret
	// rewrites the namespace's bundle, the kubelet swaps the mounted files
	// in the running pod, the upstream signs with the new CA — and a new
	// process of every runtime in the same pod (no restart) trusts it.
	t.Run("rotation", func(t *testing.T) {
		ctx := context.Background()
		ca2PEM, key2PEM, err := intercept.GenerateCA("corp interception CA 2", 24*time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := n.Client.CoreV1().ConfigMaps("egret-system").Get(ctx, "corp-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["trust-bundle.pem"] = string(ca2PEM)
		if _, err := n.Client.CoreV1().ConfigMaps("egret-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(ca2PEM)), "\n")
		marker := lines[len(lines)/2]
		start := time.Now()
		for {
			b, _ := n.KubectlCmd(ctx, "exec", "-n", ns, "clients", "-c", "curl", "--", "cat", "/etc/egret/trust/ca-bundle.pem").Output()
			if strings.Contains(string(b), marker) {
				break
			}
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("the mounted bundle did not get the new CA in %s\n%s", time.Since(start), n.KubectlT(t, "get", "configmap", "-n", ns, "egret-trust-bundle", "-o", "yaml"))
			}
			time.Sleep(2 * time.Second)
		}
		t.Logf("the new CA reached the running pod's mounted bundle in %s", time.Since(start).Round(time.Second))
		mark := len(upLog.String())
		caDir := filepath.Join(dir, "intercept-ca")
		if err := os.WriteFile(filepath.Join(caDir, "tls.key"), key2PEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(caDir, "tls.crt"), ca2PEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if !waitLine(upLog, mark, 30*time.Second, func(l map[string]any) bool { return l["msg"] == "interception CA reloaded" }) {
			t.Fatalf("the upstream did not load the new CA:\n%s", upLog.String()[mark:])
		}
		for _, rt := range realnode.Runtimes {
			path := "/" + rt + "/rotated"
			mark := len(upLog.String())
			r, o, err := fetch(n, ns, "clients", rt, "https://origin.example"+path)
			if err != nil || r.RemoteIP != out.IP || !intercepted(upLog, mark, path) {
				t.Errorf("%s after the rotation: %v (origin saw %s)\n%s", rt, err, r.RemoteIP, o)
			}
		}
		p, err := n.Client.CoreV1().Pods(ns).Get(ctx, "clients", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rs := restarts(p); rs != 0 {
			t.Errorf("the pod restarted %d times", rs)
		}
		// The pod still holds the old bundle's stamp: the drift report
		// names it stale in part trust (its Go, Node.js, JVM and Ruby
		// processes started before the rotation keep the old CA).
		var last string
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(3 * time.Second) {
			b, err := exec.Command(n.Egret, "pods", "--stale", "-n", ns, "--kubeconfig", n.Kubeconfig).CombinedOutput()
			last = string(b)
			if err == nil && regexp.MustCompile(`(?m)^\S*\s*clients\s.*trust`).MatchString(last) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("egret pods --stale does not name the pod clients stale in part trust after the rotation: %v\n%s", err, last)
			}
		}
		t.Logf("egret pods --stale:\n%s", last)
	})
}

// runtimeSwitch is the variable without which a runtime ignores
// HTTP_PROXY: Node.js reads the proxy variables only with
// NODE_USE_ENV_PROXY=1, the JVM only its -D properties (egret's are in
// JAVA_TOOL_OPTIONS).
var runtimeSwitch = map[string]string{"node": "NODE_USE_ENV_PROXY", "java": "JAVA_TOOL_OPTIONS"}

// runtimeModels are egret's NO_PROXY models (internal/noproxy) of the
// runtimes' versions in realnode.RuntimesImage: Debian 12's curl 7.88,
// python3-requests 2.28 and Ruby 3.1, Node.js 24.22.3's fetch (its
// bundled undici's EnvHttpProxyAgent), OpenJDK 17.0.15, Go 1.26.
var runtimeModels = map[string]string{
	"curl": "curl-7.88", "python": "python-requests-2.28", "node": "undici-7.23", "java": "java", "ruby": "ruby", "go": "go",
}

// originWithCA is origin with the TLS certificate's PEM (its own CA) in
// dir, for the upstream to verify the origin with.
func originWithCA(t testing.TB, out *realnode.Outside, dir string) string {
	t.Helper()
	ln, err := out.Listen("tcp", out.IP+":80")
	if err != nil {
		t.Fatal(err)
	}
	srv := echo.Server()
	go srv.Serve(ln)
	cert, caFile := testutil.SelfSigned(t, dir, "origin.example")
	tln, err := out.Listen("tcp", out.IP+":443")
	if err != nil {
		t.Fatal(err)
	}
	tsrv := echo.Server()
	go tsrv.Serve(tls.NewListener(tln, &tls.Config{Certificates: []tls.Certificate{cert}}))
	t.Cleanup(func() { srv.Close(); tsrv.Close() })
	return caFile
}

// interceptingUpstream runs egret as the corporate proxy in the outside
// namespace (out.IP:3128): a gateway whose configuration intercepts
// origin.example with the CA caPEM/keyPEM and verifies the origin with
// originCA. It returns its log.
func interceptingUpstream(t testing.TB, n *realnode.Node, out *realnode.Outside, dir string, caPEM, keyPEM []byte, originCA string) *testutil.SyncBuffer {
	t.Helper()
	caDir := filepath.Join(dir, "intercept-ca")
	if err := os.MkdirAll(caDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		filepath.Join(caDir, "tls.crt"): string(caPEM),
		filepath.Join(caDir, "tls.key"): string(keyPEM),
		filepath.Join(dir, "hosts"):     out.IP + " origin.example\n" + out.IP + " plain.example\n",
		filepath.Join(dir, "upstream.yaml"): "role: gateway\nintercept:\n  ca_dir: " + caDir + "\n  origin_ca_file: " + originCA +
			"\n  sites:\n    - hosts: [origin.example]\n",
	} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return outsideEgret(t, n, out, []string{"EGRET_HOSTS_FILE=" + filepath.Join(dir, "hosts"), "EGRET_DNS_SERVERS=127.0.0.1:1",
		"EGRET_SSRF_ALLOW_CIDRS=" + out.IP + "/32"},
		"proxy", "--role", "gateway", "--config", filepath.Join(dir, "upstream.yaml"), "--listen", out.IP+":3128", "--admin-listen", "off")
}

// upstreamClient waits up to 10 s for the upstream's line, after offset
// mark, of a request for url or a tunnel to dest (a client that tunnels
// plain HTTP: Node's fetch) and returns its client IP ("" when none).
func upstreamClient(log *testutil.SyncBuffer, mark int, url, dest string) string {
	var client string
	waitLine(log, mark, 10*time.Second, func(line map[string]any) bool {
		if line["url"] != url && (line["kind"] != "connect" || line["dest"] != dest) {
			return false
		}
		client, _ = line["client"].(string)
		if i := strings.LastIndex(client, ":"); i > 0 {
			client = client[:i]
		}
		return true
	})
	return client
}

// intercepted waits up to 10 s for the upstream's line, after offset mark,
// of an intercepted request for path.
func intercepted(log *testutil.SyncBuffer, mark int, path string) bool {
	return waitLine(log, mark, 10*time.Second, func(line map[string]any) bool { return line["kind"] == "intercept" && line["path"] == path })
}

// waitLine waits up to timeout for a JSON line after offset mark that ok
// accepts (egret writes a line when the request or tunnel ends, which may
// be after the client has its answer).
func waitLine(log *testutil.SyncBuffer, mark int, timeout time.Duration, ok func(map[string]any) bool) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, l := range strings.Split(log.String()[mark:], "\n") {
			var line map[string]any
			if json.Unmarshal([]byte(l), &line) == nil && ok(line) {
				return true
			}
		}
	}
	return false
}

// fetch runs the runtime's client in its container of pod and returns the
// echo reply, the output (stdout and stderr) and an error unless it
// exited 0 with status 200.
func fetch(n *realnode.Node, ns, pod, runtime, url string, unset ...string) (echoReply, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"exec", "-n", ns, pod, "-c", runtime, "--"}
	if len(unset) > 0 {
		args = append(args, "env")
		for _, u := range unset {
			args = append(args, "-u", u)
		}
	}
	args = append(args, realnode.RuntimeCommand(runtime, url)...)
	cmd := n.KubectlCmd(ctx, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	o := string(b) + stderr.String()
	if err != nil {
		return echoReply{}, o, fmt.Errorf("%s: %v", runtime, err)
	}
	status, body, _ := strings.Cut(string(b), "\n")
	if strings.TrimSpace(status) != "200" {
		return echoReply{}, o, fmt.Errorf("%s: status %q", runtime, status)
	}
	var r echoReply
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return echoReply{}, o, fmt.Errorf("%s: not an echo reply: %v", runtime, err)
	}
	return r, o, nil
}

// runtimesPod creates a pod with one container per runtime (the runtimes
// image, sleeping) and returns it once Ready. The java container has a
// JAVA_TOOL_OPTIONS of its own (egret appends to it), and an init
// container fetches https://origin.example/ with curl: the pod is Ready
// only if init containers get the proxy and, unless the pod opts out, the
// CA too.
func runtimesPod(t testing.TB, n *realnode.Node, ns, name, image string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: new(int64)},
	}
	for _, rt := range realnode.Runtimes {
		c := corev1.Container{Name: rt, Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}
		if rt == "java" {
			c.Env = []corev1.EnvVar{{Name: "JAVA_TOOL_OPTIONS", Value: "-XX:+UseSerialGC -Xss1m"}}
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	initURL := "https://origin.example/init-ca"
	if annotations["egret.io/inject-ca"] == "false" {
		initURL = "http://plain.example/init"
	}
	p.Spec.InitContainers = []corev1.Container{{Name: "init-curl", Image: image, ImagePullPolicy: corev1.PullNever,
		Command: realnode.RuntimeCommand("curl", initURL)}}
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err = n.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create pod %s/%s: %v", ns, name, err)
		}
		time.Sleep(time.Second)
	}
	return waitPodReady(t, n, ns, name, 2*time.Minute)
}

// waitTrustBundle waits for egret's trust bundle ConfigMap in ns.
func waitTrustBundle(t testing.TB, n *realnode.Node, ns string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		cm, err := n.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), "egret-trust-bundle", metav1.GetOptions{})
		if err == nil && cm.Labels["app.kubernetes.io/managed-by"] == "egret" && len(cm.BinaryData["truststore.p12"]) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no egret-trust-bundle in %s: %v\n%s", ns, err, n.KubectlT(t, "logs", "-n", "egret-system", "deployment/egret-webhook", "--tail=30"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// uninstall is docs/kubernetes.md's uninstall, then waits for egret's
// namespace to go: the next test installs again.
func uninstall(t testing.TB, n *realnode.Node, dir string) {
	if o, err := shell(t, n, dir, docBlock(t, "docs/kubernetes.md", "uninstall")); err != nil {
		t.Errorf("documented uninstall failed: %v\n%s", err, o)
	}
	n.KubectlCmd(context.Background(), "wait", "--for=delete", "namespace/egret-system", "--timeout=3m").Run()
}

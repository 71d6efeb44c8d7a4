package realnode

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/realnode"
	"egret.io/egret/internal/testutil/squid"
)

// The chart's trust values on a real node, behind a second kind of
// intercepting corporate proxy: Squid with ssl-bump (Debian's
// squid-openssl), the gateway's upstream, signing with the corporate CA
// the platform team puts in ConfigMap corp-ca (docs/trust.md). With
// `helm install ... --set trust.enabled=true`, each real runtime — curl,
// Python requests, Node.js fetch, Java HttpClient, Ruby, Go — in an
// injected pod trusts Squid's leaves through the bundle egret injected
// (the init container's HTTPS request included), with no change to the
// image; Squid logs each bumped request; the same image without the CA
// (egret.io/inject-ca: "false") refuses Squid's certificate.
func TestHelmTrustBehindSslBump(t *testing.T) {
	n := realnode.Get(t)
	image := n.RuntimesImage(t)
	in := &install{n: n, root: repoRoot(t), dir: t.TempDir(), home: t.TempDir(), helm: testutil.CachedTool(t, "helm")}
	dir := in.dir
	in.out = n.NewOutside(t)
	out := in.out
	originCA := originWithCA(t, out, dir)
	for _, h := range []string{"origin.example", "plain.example"} {
		if err := n.AddHost(h, out.IP); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	step := func(name string) { t.Logf("%s done at %s", name, time.Since(start).Round(time.Second)) }

	// The corporate proxy: Squid ssl-bumping every CONNECT with the
	// corporate CA, verifying the origin with the origin's own CA.
	caPEM, keyPEM, err := intercept.GenerateCA("corp ssl-bump CA", 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	sq := squid.Start(t, squid.Options{Namespace: out.NS, Listen: out.IP + ":3128",
		Hosts: map[string]string{"origin.example": out.IP, "plain.example": out.IP},
		Bump:  &squid.Bump{CACert: caPEM, CAKey: keyPEM, OriginCAFile: originCA}})

	// The install: the corporate CA where the chart's trust values read it
	// (trust.configMap corp-ca, key trust-bundle.pem: docs/trust.md's
	// command), the gateway's upstream in its Secret, then the chart.
	// An earlier test's install (TestHelm's, say) may still be going.
	n.KubectlCmd(context.Background(), "wait", "--for=delete", "namespace/egret-system", "--timeout=3m").Run()
	n.KubectlT(t, "create", "namespace", "egret-system")
	caFile := filepath.Join(dir, "corp-root.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	n.KubectlT(t, "create", "configmap", "corp-ca", "-n", "egret-system", "--from-file=trust-bundle.pem="+caFile)
	n.KubectlT(t, "create", "secret", "generic", "egret-upstream", "-n", "egret-system",
		"--from-literal=EGRET_SSRF_ALLOW_CIDRS="+out.IP+"/32", "--from-literal=UPSTREAM_PROXY=http://"+sq.Addr)
	t.Cleanup(func() {
		in.helmT(t, "uninstall", "egret", "-n", "egret-system", "--ignore-not-found", "--wait")
		n.KubectlCmd(context.Background(), "delete", "configmap", "-A", "-l", "app.kubernetes.io/managed-by=egret").Run()
		n.KubectlCmd(context.Background(), "delete", "namespace", "egret-system", "--wait=true", "--timeout=2m").Run()
	})
	in.helmT(t, "install", "egret", "deploy/helm/egret", "-n", "egret-system", "--set", "trust.enabled=true")
	n.KubectlT(t, "label", "namespace", "egret-system", "egret.io/exclude=true")
	in.available(t, realnode.EgretImage)
	step("install")

	ns := namespace(t, n, "helm-trust", map[string]string{"egret.io/inject": "enabled"})
	waitTrustBundle(t, n, ns)
	// runtimesPod's init container fetches https://origin.example/ with
	// curl: Ready means the kubelet ran it trusting Squid's leaf.
	pod := runtimesPod(t, n, ns, "clients", image, nil)
	runtimesPod(t, n, ns, "clients-noca", image, map[string]string{"egret.io/inject-ca": "false"})
	for _, c := range pod.Spec.Containers {
		if v, _ := envOf(c, "SSL_CERT_FILE"); v != "/etc/egret/trust/ca-bundle.pem" {
			t.Fatalf("container %s not injected with the CA bundle: %v", c.Name, c.Env)
		}
	}
	if l := sq.WaitLog(t, "https://origin.example/init-ca"); !strings.Contains(l, "/200 ") {
		t.Errorf("Squid did not bump the init container's request: %s", l)
	}
	step("pods")

	for _, rt := range realnode.Runtimes {
		t.Run(rt, func(t *testing.T) {
			u := "https://origin.example/" + rt + "/bumped"
			r, o, err := fetch(n, ns, "clients", rt, u)
			if err != nil || !r.TLS || r.RemoteIP != out.IP {
				t.Fatalf("HTTPS behind ssl-bump with the injected bundle: %v (origin saw %s)\n%s", err, r.RemoteIP, o)
			}
			if l := sq.WaitLog(t, u); !strings.Contains(l, "/200 ") {
				t.Errorf("Squid's line for %s: %s", u, l)
			}
			_, o, err = fetch(n, ns, "clients-noca", rt, "https://origin.example/"+rt+"/noca")
			if err == nil {
				t.Errorf("without the CA the runtime trusted Squid's leaf:\n%s", o)
			} else if !regexp.MustCompile(`(?i)certificate|PKIX|x509`).MatchString(o) {
				t.Errorf("without the CA: %v, want a certificate error\n%s", err, o)
			}
		})
	}
	step("runtimes")
}

package realnode

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/testutil/realnode"
	"egret.io/egret/internal/testutil/squid"
)

// The default install (gateway mode) from the shipped manifests, used as a
// platform team would, then the documented uninstall.
func TestGatewayInstallUninstall(t *testing.T) {
	n := realnode.Get(t)
	root := repoRoot(t)
	out := n.NewOutside(t)
	origin(t, out)
	if err := n.AddHost("origin.example", out.IP); err != nil {
		t.Fatal(err)
	}

	// egret.yaml: the release's plain manifests are the default overlay
	// rendered; installed with the documented command.
	dir := t.TempDir()
	manifests := n.KubectlT(t, "kustomize", filepath.Join(root, "deploy/overlays/default"))
	if err := os.WriteFile(filepath.Join(dir, "egret.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	// The origin's network is not global unicast: the gateway's SSRF
	// guard refuses it unless allowed, with a setting in the gateway's
	// Secret (created first, so the gateways start with it).
	n.KubectlT(t, "create", "namespace", "egret-system")
	// A failure before the documented uninstall leaves the install to be
	// removed, so the tests after this one (TestHelm installs into
	// egret-system too) start from a node without egret.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		n.KubectlCmd(ctx, "delete", "--ignore-not-found", "--wait=false", "-f", filepath.Join(dir, "egret.yaml")).Run()
		n.KubectlCmd(ctx, "delete", "namespace", "--ignore-not-found", "egret-system").Run()
		n.KubectlCmd(ctx, "wait", "--for=delete", "namespace/egret-system", "--timeout=3m").Run()
	})
	n.KubectlT(t, "create", "secret", "generic", "egret-upstream", "-n", "egret-system",
		"--from-literal=EGRET_SSRF_ALLOW_CIDRS="+out.IP+"/32")
	if o, err := shell(t, n, dir, "kubectl apply --server-side -f egret.yaml"); err != nil {
		t.Fatalf("install: %v\n%s", err, o)
	}
	n.KubectlT(t, "wait", "-n", "egret-system", "--for=condition=Available", "deployment", "--all", "--timeout=3m")
	n.KubectlT(t, "rollout", "status", "-n", "egret-system", "deployment/egret-webhook", "--timeout=3m")
	n.KubectlT(t, "rollout", "status", "-n", "egret-system", "deployment/egret-gateway", "--timeout=3m")
	noRestarts(t, n, "egret-system", "")

	ns := namespace(t, n, "shop", map[string]string{"egret.io/inject": "enabled"})
	pod := clientPod(t, n, ns, "client")
	proxy, ok := envOf(pod.Spec.Containers[0], "HTTP_PROXY")
	if !ok || !strings.Contains(proxy, "egret-gateway") {
		t.Fatalf("pod not injected with the gateway: HTTP_PROXY=%q (env %v)", proxy, pod.Spec.Containers[0].Env)
	}
	gateways := podIPs(t, n, "egret-system", "app.kubernetes.io/name=egret-gateway")

	// HTTP and CONNECT to the outside go through a gateway replica; the
	// name is resolved by the gateway (CoreDNS), not the client.
	r := get(t, n, ns, "client", "app", "http://origin.example/")
	if !slices.Contains(gateways, r.RemoteIP) {
		t.Errorf("HTTP reached the origin from %s, not from a gateway %v", r.RemoteIP, gateways)
	}
	r = get(t, n, ns, "client", "app", "-k", "https://origin.example/")
	if !slices.Contains(gateways, r.RemoteIP) || !r.TLS {
		t.Errorf("HTTPS (CONNECT) reached the origin from %s (tls %v), not from a gateway %v", r.RemoteIP, r.TLS, gateways)
	}
	// A ClusterIP Service goes direct: the server sees the client pod.
	n.KubectlT(t, "create", "deployment", "-n", ns, "echo", "--image="+realnode.EgretImage, "--port=8080", "--", "/egret", "echo")
	n.KubectlT(t, "expose", "deployment", "-n", ns, "echo", "--port=8080")
	n.KubectlT(t, "wait", "-n", ns, "--for=condition=Available", "deployment/echo", "--timeout=2m")
	// A short name, http://echo:8080/, is not in NO_PROXY (no list holds
	// every Service's), so it goes to the gateway, which refuses it (the
	// default EGRET_SHORT_NAMES=refuse): a 502 that names the FQDN and the
	// fix, never the gateway's own namespace's Service of that name.
	if code, body := status(t, n, ns, "client", "http://echo:8080/"); code != "502" ||
		!strings.Contains(body, "short name") || !strings.Contains(body, "NO_PROXY") {
		t.Errorf("short name via the gateway: %s %q, want 502 naming the fix", code, body)
	}
	for _, u := range []string{"http://echo." + ns + ".svc:8080/", "http://echo." + ns + ".svc.cluster.local:8080/"} {
		r = getEventually(t, n, ns, "client", "app", u)
		if r.RemoteIP != pod.Status.PodIP {
			t.Errorf("%s: the Service saw %s, want the client pod %s (direct)", u, r.RemoteIP, pod.Status.PodIP)
		}
	}

	// Sidecar mode (pod annotation): a native sidecar per pod, Ready
	// with zero restarts (its probes reach the admin listener on the pod
	// IP), HTTP and HTTPS go sidecar → gateway → an upstream Squid with
	// Basic auth whose URL and credentials the gateway reads from the
	// Secret egret-upstream (created after the install: read without a
	// restart); the Service still goes direct.
	sq := squid.Start(t, squid.Options{User: "corp", Password: "s3cret-pw", Namespace: out.NS,
		Listen: out.IP + ":3128", Hosts: map[string]string{"origin.example": out.IP}})
	secret := n.KubectlT(t, "create", "secret", "generic", "-n", "egret-system", "egret-upstream", "--dry-run=client", "-o", "yaml",
		"--from-literal=EGRET_SSRF_ALLOW_CIDRS="+out.IP+"/32", "--from-literal=UPSTREAM_PROXY=http://corp:s3cret-pw@"+sq.Addr)
	sf := filepath.Join(dir, "upstream.yaml")
	if err := os.WriteFile(sf, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	n.KubectlT(t, "apply", "-f", sf)
	sns := namespace(t, n, "sidecars", map[string]string{"egret.io/inject": "enabled"})
	// By the pod's annotation here; TestHelm/policy sets the mode on the
	// namespace just before its pods (the webhook reads it live).
	sp := clientPod(t, n, sns, "client", "egret.io/mode", "sidecar")
	if len(sp.Spec.InitContainers) != 1 || sp.Spec.InitContainers[0].Name != "egret-proxy" {
		t.Fatalf("sidecar mode: init containers %+v", sp.Spec.InitContainers)
	}
	// Each gateway replica reads the Secret when the kubelet updates its
	// volume, at its own time: wait until ten requests in a row, HTTP and
	// HTTPS in turn, whichever replica takes them, go through the Squid.
	deadline := time.Now().Add(3 * time.Minute)
	for ok := 0; ok < 10; {
		args := []string{"http://origin.example/"}
		if ok%2 == 1 {
			args = []string{"-k", "https://origin.example/"}
		}
		r = get(t, n, sns, "client", "app", args...)
		if r.RemoteIP == out.IP {
			ok++
			continue
		}
		ok = 0
		if time.Now().After(deadline) {
			t.Fatalf("sidecar mode: %s still reaches the origin from %s, not through the upstream Squid %s", args[len(args)-1], r.RemoteIP, sq.Addr)
		}
		time.Sleep(2 * time.Second)
	}
	sq.WaitLog(t, "corp")
	r = get(t, n, sns, "client", "app", "-k", "https://origin.example/")
	if r.RemoteIP != out.IP || !r.TLS {
		t.Errorf("sidecar mode: HTTPS reached the origin from %s (tls %v), want the Squid %s", r.RemoteIP, r.TLS, out.IP)
	}
	sq.WaitLog(t, "CONNECT origin.example:443")
	r = getEventually(t, n, sns, "client", "app", "http://echo."+ns+".svc.cluster.local:8080/")
	if r.RemoteIP != sp.Status.PodIP {
		t.Errorf("sidecar mode: the Service saw %s, want the client pod %s (direct)", r.RemoteIP, sp.Status.PodIP)
	}
	sp, err := n.Client.CoreV1().Pods(sns).Get(context.Background(), "client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rs := restarts(sp); rs != 0 {
		t.Errorf("sidecar mode: %d restarts\n%s", rs, n.KubectlT(t, "describe", "pod", "-n", sns, "client"))
	}
	for _, l := range sq.AccessLog() {
		if strings.Contains(l, "s3cret-pw") {
			t.Errorf("the password reached Squid's log line: %s", l)
		}
	}

	// The documented uninstall, under set -e.
	if o, err := shell(t, n, dir, docBlock(t, "docs/kubernetes.md", "uninstall")); err != nil {
		t.Fatalf("documented uninstall failed: %v\n%s", err, o)
	}
	n.KubectlT(t, "wait", "--for=delete", "namespace/egret-system", "--timeout=3m")
	ns2 := namespace(t, n, "shop2", map[string]string{"egret.io/inject": "enabled"})
	after := clientPod(t, n, ns2, "after")
	if _, ok := envOf(after.Spec.Containers[0], "HTTP_PROXY"); ok || len(after.Spec.InitContainers) > 0 {
		t.Errorf("a pod created after the uninstall was injected: %+v", after.Spec)
	}
}

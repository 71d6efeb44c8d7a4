package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/testutil/realnode"
)

// applyYAML applies a manifest given inline.
func applyYAML(t testing.TB, n *realnode.Node, manifest string) {
	t.Helper()
	cmd := n.KubectlCmd(context.Background(), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

// status runs /bin/get in a pod and returns the HTTP status it printed
// ("error: ..." when the request failed) and the body.
func status(t testing.TB, n *realnode.Node, ns, pod string, args ...string) (string, string) {
	t.Helper()
	cmd := append([]string{"exec", "-n", ns, pod, "-c", "app", "--", "/bin/get"}, args...)
	out, _ := n.KubectlCmd(context.Background(), cmd...).Output()
	code, body, _ := strings.Cut(string(out), "\n")
	return code, body
}

// gatewayLines returns the gateway replicas' JSON log lines.
func gatewayLines(t testing.TB, n *realnode.Node) []map[string]any {
	t.Helper()
	out := n.KubectlT(t, "logs", "-n", "egret-system", "-l", "app.kubernetes.io/name=egret-gateway",
		"--tail=-1", "--max-log-requests=10")
	var lines []map[string]any
	for _, l := range strings.Split(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			lines = append(lines, m)
		}
	}
	return lines
}

// Per-workload policy at the gateway (policy.enabled by the upgrade): two
// namespaces, two EgressPolicies, two verdicts for the same destination,
// the client named by its real pod IP (gateway mode) and by its projected
// token through the injected sidecar (sidecar mode, set on the namespace
// just before the pod: the webhook reads it live).
func (in *install) policy(t *testing.T, sidecarImage string) {
	n := in.n
	allow := namespace(t, n, "pol-allow", map[string]string{"egret.io/inject": "enabled"})
	deny := namespace(t, n, "pol-deny", map[string]string{"egret.io/inject": "enabled"})
	applyYAML(t, n, fmt.Sprintf(`apiVersion: egret.io/v1alpha1
kind: EgressPolicy
metadata: {name: web, namespace: %s}
spec:
  default: deny
  egress:
  - {name: origin, action: allow, hosts: [origin.example]}
---
apiVersion: egret.io/v1alpha1
kind: EgressPolicy
metadata: {name: web, namespace: %s}
spec:
  default: deny
  egress:
  - {name: elsewhere, action: allow, hosts: [elsewhere.example]}
`, allow, deny))
	for _, ns := range []string{allow, deny} {
		n.KubectlT(t, "wait", "-n", ns, "--for=condition=Accepted", "egresspolicy/web", "--timeout=1m")
	}
	gateways := podIPs(t, n, "egret-system", "app.kubernetes.io/name=egret-gateway")

	// Gateway mode: identity from the pod's address.
	a := clientPod(t, n, allow, "client")
	d := clientPod(t, n, deny, "client")
	r := get(t, n, allow, "client", "app", "http://origin.example/")
	if !slices.Contains(gateways, r.RemoteIP) {
		t.Errorf("allowed namespace: the origin saw %s, not a gateway %v", r.RemoteIP, gateways)
	}
	if code, body := status(t, n, deny, "client", "http://origin.example/"); code != "403" {
		t.Errorf("denied namespace, gateway mode: %s %s, want 403 from the gateway", code, body)
	}

	// Sidecar mode, chosen on the namespace right before each pod.
	for _, ns := range []string{allow, deny} {
		n.KubectlT(t, "annotate", "namespace", ns, "egret.io/mode=sidecar")
	}
	as := clientPod(t, n, allow, "sc")
	ds := clientPod(t, n, deny, "sc")
	for _, p := range []*struct {
		ns   string
		init int
		img  string
	}{{allow, len(as.Spec.InitContainers), ""}, {deny, len(ds.Spec.InitContainers), ""}} {
		if p.init != 1 {
			t.Fatalf("%s/sc: not in sidecar mode (%d init containers): the namespace annotation set just before did not apply", p.ns, p.init)
		}
	}
	if img := as.Spec.InitContainers[0].Image; img != sidecarImage {
		t.Errorf("sidecar image %s, want the upgraded %s", img, sidecarImage)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		r = get(t, n, allow, "sc", "app", "http://origin.example/")
		if slices.Contains(gateways, r.RemoteIP) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sidecar mode, allowed: the origin saw %s, not a gateway %v", r.RemoteIP, gateways)
		}
		time.Sleep(time.Second)
	}
	if code, body := status(t, n, deny, "sc", "http://origin.example/"); code != "403" {
		t.Errorf("denied namespace, sidecar mode: %s %s, want 403", code, body)
	}
	if code, body := status(t, n, deny, "sc", "-k", "https://origin.example/"); code == "200" {
		t.Errorf("denied namespace, sidecar mode, CONNECT: %s %s, want a refusal", code, body)
	}

	// The gateway's log names each client: by address for the plain pods
	// (their real pod IPs), by token for the sidecars.
	want := map[string]string{
		allow + "/client": "address", deny + "/client": "address",
		allow + "/sc": "token", deny + "/sc": "token",
	}
	ips := map[string]string{allow + "/client": a.Status.PodIP, deny + "/client": d.Status.PodIP}
	seen := map[string]string{}
	deadline = time.Now().Add(30 * time.Second)
	for {
		for _, l := range gatewayLines(t, n) {
			ns, _ := l["namespace"].(string)
			pod, _ := l["pod"].(string)
			id, _ := l["identity"].(string)
			key := ns + "/" + pod
			if _, ok := want[key]; ok && id != "" {
				seen[key] = id
				if ip, ok := ips[key]; ok {
					if c, _ := l["client"].(string); c != "" && !strings.HasPrefix(c, ip+":") && c != ip {
						t.Errorf("%s: logged client %s, want its pod IP %s", key, c, ip)
					}
				}
			}
		}
		if len(seen) == len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	for k, id := range want {
		if seen[k] != id {
			t.Errorf("gateway log: %s identified by %q, want %q", k, seen[k], id)
		}
	}
	for _, ns := range []string{allow, deny} {
		p, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), "sc", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rs := restarts(p); rs != 0 {
			t.Errorf("%s/sc: %d restarts", ns, rs)
		}
	}
}

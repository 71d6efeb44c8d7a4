package realnode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil/realnode"
	"egret.io/egret/internal/testutil/squid"
)

// setUpstream writes the gateway's Secret egret-upstream (kubectl apply:
// an update in place, as an operator rotates it).
func (in *install) setUpstream(t testing.TB, upstream string) {
	t.Helper()
	args := []string{"create", "secret", "generic", "-n", "egret-system", "egret-upstream", "--dry-run=client", "-o", "yaml",
		"--from-literal=EGRET_SSRF_ALLOW_CIDRS=" + in.out.IP + "/32"}
	if upstream != "" {
		args = append(args, "--from-literal=UPSTREAM_PROXY="+upstream)
	}
	f := filepath.Join(in.dir, "upstream.yaml")
	if err := os.WriteFile(f, []byte(in.n.KubectlT(t, args...)), 0o600); err != nil {
		t.Fatal(err)
	}
	in.n.KubectlT(t, "apply", "-f", f)
}

// Sidecar mode with the gateway behind an upstream Squid with Basic auth:
// the credential in the Secret egret-upstream is rotated (the new user
// added at Squid, the Secret changed, the old password then revoked) while
// the application sends a request every 100 ms: none is lost. The short
// name of a Service of the pod's namespace and the API server's address
// (what client-go in a pod dials: KUBERNETES_SERVICE_HOST) go direct, not
// through the sidecar; so does a pod's IP.
func (in *install) rotation(t *testing.T) {
	n := in.n
	out := in.out
	sq := squid.Start(t, squid.Options{User: "corp", Password: "old-pw", Namespace: out.NS,
		Listen: out.IP + ":3128", Hosts: map[string]string{"origin.example": out.IP},
		Extra: "auth_param basic credentialsttl 2 seconds\n"})
	in.setUpstream(t, "http://corp:old-pw@"+sq.Addr)
	defer in.setUpstream(t, "")

	ns := namespace(t, n, "rot", map[string]string{"egret.io/inject": "enabled"})
	n.KubectlT(t, "annotate", "namespace", ns, "egret.io/mode=sidecar")
	clientPod(t, n, ns, "client")
	// The Secret reaches the gateways' volume within the kubelet's sync.
	deadline := time.Now().Add(2 * time.Minute)
	for get(t, n, ns, "client", "app", "http://origin.example/").RemoteIP != out.IP {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not use the upstream Squid after 2m")
		}
		time.Sleep(2 * time.Second)
	}
	sq.WaitLog(t, "corp")

	stop := traffic(t, n, ns, "client", "http://origin.example/")
	time.Sleep(2 * time.Second)
	sq.SetPassword(t, "corp-next", "new-pw")
	start := time.Now()
	in.setUpstream(t, "http://corp-next:new-pw@"+sq.Addr)
	// The kubelet updates the Secret's volume at its next sync; the
	// gateways then reload.
	for deadline := time.Now().Add(3 * time.Minute); !squidSaw(sq, " corp-next "); {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("the rotated credential is not used 3m after the Secret changed")
		}
		time.Sleep(time.Second)
	}
	t.Logf("the rotated credential was in use %s after the Secret changed", time.Since(start).Round(100*time.Millisecond))
	sq.SetPassword(t, "corp", "revoked-"+time.Now().Format("150405"))
	time.Sleep(5 * time.Second) // past Squid's credentialsttl
	lines := stop()
	if bad := failures(lines); len(bad) > 0 || len(lines) < 20 {
		t.Errorf("%d of %d requests failed during the rotation: %q", len(bad), len(lines), bad)
	}
	t.Logf("%d requests during the rotation, %d failed", len(lines), len(failures(lines)))
	for _, l := range sq.AccessLog() {
		if strings.Contains(l, "old-pw") || strings.Contains(l, "new-pw") {
			t.Errorf("a password reached Squid's log: %s", l)
		}
	}

	// Direct: the short name of a Service in the pod's namespace, and the
	// API server by the address client-go uses.
	echoPod := egretPod(t, n, ns, "echo", map[string]string{"app": "echo"})
	n.KubectlT(t, "expose", "pod", "-n", ns, "echo", "--port=8080")
	client := n.KubectlT(t, "get", "pod", "-n", ns, "client", "-o", "jsonpath={.status.podIP}")
	r := getEventually(t, n, ns, "client", "app", "http://echo:8080/")
	if r.RemoteIP != client {
		t.Errorf("short name: the Service saw %s, want the client pod %s (direct)", r.RemoteIP, client)
	}
	podURL := "http://" + echoPod.Status.PodIP + ":8080/"
	if r := get(t, n, ns, "client", "app", podURL); r.RemoteIP != client {
		t.Errorf("pod IP: the pod saw %s, want the client pod %s (direct)", r.RemoteIP, client)
	}
	kubeHost := kubeServiceHost(t, n, ns)
	code, body := status(t, n, ns, "client", "-k", "https://"+kubeHost+"/version")
	if code != "200" || !strings.Contains(body, "gitVersion") {
		t.Errorf("API server from the pod: %s %s", code, body)
	}
	// The short name is not in NO_PROXY (no list can hold every Service's):
	// the app hands it to its sidecar, which resolves it into the Service
	// range and connects directly, never to the gateway. The API server's
	// address is in NO_PROXY: the sidecar never sees it.
	sidecarLog := n.KubectlT(t, "logs", "-n", ns, "client", "-c", "egret-proxy")
	short := 0
	for _, l := range strings.Split(sidecarLog, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "request" {
			continue
		}
		dest, _ := m["dest"].(string)
		switch {
		case dest == "echo:8080":
			short++
			if m["route"] != "direct" || m["upstream"] != nil {
				t.Errorf("the sidecar sent the short name elsewhere than direct: %s", l)
			}
		case strings.HasPrefix(dest, kubeHost+":"), strings.HasPrefix(dest, echoPod.Status.PodIP+":"):
			t.Errorf("an address in NO_PROXY (the API server's, a pod's) reached the sidecar: %s", l)
		}
	}
	if short == 0 {
		t.Errorf("the sidecar's log has no line for the short name (its route unproven):\n%s", sidecarLog)
	}
}

// kubeServiceHost is KUBERNETES_SERVICE_HOST in a pod's app container.
func kubeServiceHost(t testing.TB, n *realnode.Node, ns string) string {
	t.Helper()
	h := strings.TrimSpace(n.KubectlT(t, "exec", "-n", ns, "client", "-c", "app", "--", "sh", "-c", "echo $KUBERNETES_SERVICE_HOST"))
	if h == "" {
		t.Fatal("KUBERNETES_SERVICE_HOST is empty in the pod")
	}
	return h
}

// squidSaw says whether a line of Squid's access log contains s.
func squidSaw(sq *squid.Squid, s string) bool {
	for _, l := range sq.AccessLog() {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

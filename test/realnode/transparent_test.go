package realnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/realnode"
)

// upstream runs egret as the outside world's forward proxy on out.IP:3128
// (its names from the namespace's hosts file: no real DNS) and returns its
// log.
func upstream(t testing.TB, n *realnode.Node, out *realnode.Outside, hosts string) *testutil.SyncBuffer {
	t.Helper()
	out.WriteEtc(t, "hosts", hosts)
	out.WriteEtc(t, "resolv.conf", "")
	var log testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	cmd := out.Command(ctx, n.Egret, "proxy", "--listen", out.IP+":3128", "--admin-listen", "off")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("upstream egret not ready: %s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &log
}

// The example of docs/transparent.md, applied as written (VERSION and
// my-app replaced): zero restarts, iptables → proxy → app, and an app that
// ignores the proxy variables is captured and sent to the upstream.
func TestTransparentExample(t *testing.T) {
	n := realnode.Get(t)
	out := n.NewOutside(t)
	origin(t, out)
	if err := n.AddHost("origin.example", out.IP); err != nil {
		t.Fatal(err)
	}
	upLog := upstream(t, n, out, out.IP+" origin.example\n")

	ns := namespace(t, n, "transparent", nil)
	n.KubectlT(t, "create", "secret", "generic", "-n", ns, "egress-proxy", "--from-literal=url=http://"+out.IP+":3128")
	manifest := docBlock(t, "docs/transparent.md", "transparent-pod")
	manifest = strings.ReplaceAll(manifest, "ghcr.io/egret-io/egret:VERSION-iptables", realnode.EgretIptablesImage)
	manifest = strings.ReplaceAll(manifest, "image: my-app", "image: "+realnode.ClientImage)
	f := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	n.KubectlT(t, "apply", "-n", ns, "-f", f)
	pod := waitPodReady(t, n, ns, "app", 2*time.Minute)
	// Give a failing probe time to act before counting restarts.
	time.Sleep(3 * time.Second)
	pod, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := restarts(pod); r != 0 {
		t.Errorf("restarts: %d, want 0\n%s", r, n.KubectlT(t, "describe", "pod", "-n", ns, "app"))
	}
	// Order enforced by the kubelet: the iptables init container ended
	// (exit 0) before the proxy started; the app started after the proxy
	// was started (its startup probe passed).
	st := map[string]corev1.ContainerStatus{}
	for _, s := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		st[s.Name] = s
	}
	ipt, proxy, app := st["egret-iptables"], st["egret-proxy"], st["app"]
	if ipt.State.Terminated == nil || ipt.State.Terminated.ExitCode != 0 {
		t.Fatalf("egret-iptables: %+v", ipt.State)
	}
	if proxy.State.Running == nil || app.State.Running == nil || proxy.Started == nil || !*proxy.Started {
		t.Fatalf("proxy %+v app %+v", proxy.State, app.State)
	}
	if proxy.State.Running.StartedAt.Before(&ipt.State.Terminated.FinishedAt) {
		t.Errorf("proxy started %s before iptables finished %s", proxy.State.Running.StartedAt, ipt.State.Terminated.FinishedAt)
	}
	if app.State.Running.StartedAt.Before(&proxy.State.Running.StartedAt) {
		t.Errorf("app started %s before the proxy %s", app.State.Running.StartedAt, proxy.State.Running.StartedAt)
	}
	if logs := n.KubectlT(t, "logs", "-n", ns, "app", "-c", "egret-iptables"); !strings.Contains(logs, "validation passed") {
		t.Errorf("iptables log without validation: %s", logs)
	}
	// The app ignores the proxy variables (-direct): captured by the rules,
	// sent by the sidecar to the upstream, which the origin sees.
	r := get(t, n, ns, "app", "app", "-direct", "http://origin.example/")
	if r.RemoteIP != out.IP {
		t.Errorf("captured HTTP reached the origin from %s, want the upstream %s (pod %s)", r.RemoteIP, out.IP, pod.Status.PodIP)
	}
	r = get(t, n, ns, "app", "app", "-direct", "-k", "https://origin.example/")
	if r.RemoteIP != out.IP || !r.TLS {
		t.Errorf("captured HTTPS reached the origin from %s (tls %v), want the upstream %s", r.RemoteIP, r.TLS, out.IP)
	}
	if !strings.Contains(upLog.String(), "origin.example") {
		t.Errorf("the upstream did not log origin.example:\n%s", upLog.String())
	}
	if logs := n.KubectlT(t, "logs", "-n", ns, "app", "-c", "egret-proxy"); !strings.Contains(logs, `"transparent"`) {
		t.Errorf("the sidecar did not log a transparent connection:\n%s", logs)
	}
}

var _ = exec.Command

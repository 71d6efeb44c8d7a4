package realnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
	"egret.io/egret/internal/testutil/realnode"
)

// A pod whose image is in a registry that the node reaches only through a
// proxy: ImagePullBackOff until `egret node render`'s drop-in gives
// containerd its proxy (the harness restarts containerd with the
// drop-in's environment, as systemctl would), then Running, the pull in
// the proxy's log; `egret node check` predicts both.
func TestNodeRuntimePullThroughProxy(t *testing.T) {
	n := realnode.Get(t)
	// The proxy's network (reachable from the host) and, behind it, the
	// registry's (100.127.77.0/24: blackholed on the host, reachable only
	// from the proxy's namespace).
	proxyNS := n.NewOutside(t)
	regNS := netns.New(t, "registry")
	netns.Link(t, proxyNS.NS, regNS, []string{"100.127.77.1/24"}, []string{"100.127.77.2/24"})
	if out, err := exec.Command("ip", "route", "add", "blackhole", "100.127.77.0/24").CombinedOutput(); err != nil {
		t.Fatalf("blackhole route: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "route", "del", "blackhole", "100.127.77.0/24").Run() })

	// docker-registry (Debian's distribution 2.8) in its namespace.
	dir := t.TempDir()
	cfg := "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: " + filepath.Join(dir, "reg") + "\nhttp:\n  addr: 100.127.77.2:5000\n"
	if err := os.WriteFile(filepath.Join(dir, "registry.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var regLog testutil.SyncBuffer
	reg := regNS.Command(ctx, "/usr/bin/docker-registry", "serve", filepath.Join(dir, "registry.yml"))
	reg.Stdout, reg.Stderr = &regLog, &regLog
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); reg.Wait() })
	// The proxy: egret in the proxy namespace.
	upLog := upstream(t, n, proxyNS, "")
	proxyURL := "http://" + proxyNS.IP + ":3128"

	// Push the client image through the proxy (the host cannot reach the
	// registry either), then forget the name: the pod's pull must resolve
	// it at the registry.
	const ref = "100.127.77.2:5000/egret-test/client:1"
	if _, err := n.Ctr("images", "tag", "--force", realnode.ClientImage, ref); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		push := exec.Command("/usr/bin/ctr", "--address", realnode.ContainerdSocket(), "-n", "k8s.io", "images", "push", "--plain-http", ref)
		push.Env = append(os.Environ(), "HTTP_PROXY="+proxyURL, "NO_PROXY=")
		out, err := push.CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("push %s through %s: %v\n%s\nregistry: %s", ref, proxyURL, err, out, regLog.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := n.Ctr("images", "rm", ref); err != nil {
		t.Fatal(err)
	}
	pushed := len(upLog.String())
	// containerd: plain HTTP for that registry (hosts.toml).
	hostsDir := filepath.Join(realnode.CertsDir(), "100.127.77.2:5000")
	os.MkdirAll(hostsDir, 0o755)
	if err := os.WriteFile(filepath.Join(hostsDir, "hosts.toml"), []byte("server = \"http://100.127.77.2:5000\"\n[host.\"http://100.127.77.2:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostsDir) })

	// The commands are docs/node.md's example, run as written but for the
	// proxy, the unit directory (a scratch one for /etc/systemd/system)
	// and containerd's PID (this node's, not a systemd one).
	steps := nodeDocSteps(t)
	unitDir := filepath.Join(dir, "systemd")
	egret := func(line string) (string, int) {
		line = strings.ReplaceAll(line, "http://proxy.corp.example:3128", proxyURL)
		line = strings.ReplaceAll(line, "/etc/systemd/system", unitDir)
		args := strings.Fields(line)
		if args[0] != "egret" {
			t.Fatalf("docs/node.md: %q is not an egret command", line)
		}
		args = args[1:]
		if args[1] == "check" {
			args = append(args, "--pid", strconv.Itoa(n.ContainerdPID()), "--unit-dir", unitDir, "--unit-dir", "/lib/systemd/system")
		}
		out, err := exec.Command(n.Egret, args...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	check := func() (string, int) { return egret(steps[0]) }
	if out, code := check(); code != 1 {
		t.Errorf("egret node check before the drop-in: exit %d, want 1 (no proxy)\n%s", code, out)
	}

	ns := namespace(t, n, "noderuntime", nil)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pulled", Namespace: ns},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "app", Image: ref, ImagePullPolicy: corev1.PullAlways}}},
	}
	if _, err := n.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWaitingReason(t, n, ns, "pulled", []string{"ErrImagePull", "ImagePullBackOff"}, 90*time.Second)

	// egret node render → the drop-in → containerd restarted with it.
	for _, want := range []string{realnode.PodCIDR, realnode.ServiceCIDR, realnode.NodeIP} {
		if !strings.Contains(steps[1], want) {
			t.Errorf("docs/node.md's render line lacks this node's %s: %s", want, steps[1])
		}
	}
	if out, code := egret(steps[1]); code != 0 {
		t.Fatalf("egret node render: exit %d\n%s", code, out)
	}
	dropIn, err := os.ReadFile(filepath.Join(dir, "systemd", "containerd.service.d", "http-proxy.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, m := range regexp.MustCompile(`(?m)^Environment="([^"]*)"$`).FindAllStringSubmatch(string(dropIn), -1) {
		env = append(env, m[1])
	}
	if len(env) != 6 {
		t.Fatalf("drop-in: %d Environment lines, want 6:\n%s", len(env), dropIn)
	}
	if steps[2] != "systemctl daemon-reload && systemctl restart containerd" {
		t.Fatalf("docs/node.md's third line is %q, want the restart the harness does", steps[2])
	}
	if err := n.RestartContainerd(env); err != nil {
		t.Fatal(err)
	}
	if out, code := egret(steps[3]); code != 0 {
		t.Errorf("egret node check after the drop-in: exit %d, want 0\n%s", code, out)
	}
	// The kubelet's back-off may be long: a new pod pulls at once.
	n.Client.CoreV1().Pods(ns).Delete(context.Background(), "pulled", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	pod.Name = "pulled2"
	if _, err := n.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodReady(t, n, ns, "pulled2", 2*time.Minute)
	if l := upLog.String()[pushed:]; !strings.Contains(l, "/v2/egret-test/client/manifests/1") {
		t.Errorf("the proxy's log does not show the pull:\n%s", l)
	}
}

// waitWaitingReason waits until the pod's first container waits for one of
// reasons.
func waitWaitingReason(t testing.TB, n *realnode.Node, ns, name string, reasons []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		p, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && len(p.Status.ContainerStatuses) > 0 {
			if w := p.Status.ContainerStatuses[0].State.Waiting; w != nil {
				last = w.Reason + ": " + w.Message
				for _, r := range reasons {
					if w.Reason == r {
						return
					}
				}
			}
			if p.Status.ContainerStatuses[0].State.Running != nil {
				t.Fatalf("pod %s/%s is Running: the image was pulled without the proxy", ns, name)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s never waited for %v (last: %s)", ns, name, reasons, last)
}

// nodeDocSteps returns the commands of docs/node.md's block
// node-pull-through-proxy, continuation lines joined and comments dropped:
// check, render, restart, check.
func nodeDocSteps(t testing.TB) []string {
	t.Helper()
	block := strings.ReplaceAll(docBlock(t, "docs/node.md", "node-pull-through-proxy"), "\\\n", " ")
	var steps []string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			steps = append(steps, l)
		}
	}
	if len(steps) != 4 || !strings.HasPrefix(steps[0], "egret node check") || !strings.HasPrefix(steps[1], "egret node render") || steps[0] != steps[3] {
		t.Fatalf("docs/node.md node-pull-through-proxy: want check, render, restart, the same check; got %q", steps)
	}
	return steps
}

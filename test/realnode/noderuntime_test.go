package realnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	// proxy, the unit directory and containerd's PID.
	steps := nodeDocSteps(t, "node-pull-through-proxy", "containerd")
	unitDir := filepath.Join(dir, "systemd")
	egret := func(line string) (string, int) { return nodeEgret(t, n, line, proxyURL, unitDir, n.ContainerdPID()) }
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
	env := dropInEnv(t, unitDir, "containerd")
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

// nodeDocSteps returns the commands of docs/node.md's block, continuation
// lines joined and comments dropped: check, render, the restart of
// runtime's unit (which the harness does instead), the same check.
func nodeDocSteps(t testing.TB, block, runtime string) []string {
	t.Helper()
	text := strings.ReplaceAll(docBlock(t, "docs/node.md", block), "\\\n", " ")
	var steps []string
	for _, l := range strings.Split(text, "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			steps = append(steps, l)
		}
	}
	if len(steps) != 4 || !strings.HasPrefix(steps[0], "egret node check --runtime "+runtime) ||
		!strings.HasPrefix(steps[1], "egret node render --runtime "+runtime) || steps[0] != steps[3] ||
		steps[2] != "systemctl daemon-reload && systemctl restart "+runtime {
		t.Fatalf("docs/node.md %s: want check, render, restart (of %s), the same check; got %q", block, runtime, steps)
	}
	return steps
}

// nodeEgret runs an egret command line of docs/node.md as written but for
// the proxy (proxyURL for http://proxy.corp.example:3128), the unit
// directory (unitDir for /etc/systemd/system) and, for node check, the
// daemon's PID (this node's, not a systemd one); it returns the output
// and the exit status.
func nodeEgret(t testing.TB, n *realnode.Node, line, proxyURL, unitDir string, pid int) (string, int) {
	t.Helper()
	line = strings.ReplaceAll(line, "http://proxy.corp.example:3128", proxyURL)
	line = strings.ReplaceAll(line, "/etc/systemd/system", unitDir)
	args := strings.Fields(line)
	if args[0] != "egret" {
		t.Fatalf("docs/node.md: %q is not an egret command", line)
	}
	args = args[1:]
	if args[1] == "check" {
		args = append(args, "--pid", strconv.Itoa(pid), "--unit-dir", unitDir, "--unit-dir", "/lib/systemd/system")
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

// dropInEnv is the NAME=VALUE of each Environment= line of the drop-in
// egret node render wrote for unit under unitDir: the six proxy variables.
func dropInEnv(t testing.TB, unitDir, unit string) []string {
	t.Helper()
	dropIn, err := os.ReadFile(filepath.Join(unitDir, unit+".service.d", "http-proxy.conf"))
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
	return env
}

// The kubelet's drop-in on the node's real kubelet: docs/node.md's
// node-kubelet-drop-in lines, run as written but for the proxy, the unit
// directory and the kubelet's PID (the harness restarts the kubelet with
// the drop-in's environment where systemctl would). The kubelet then runs
// with exactly the rendered variables, still reaches its API server
// directly (a Lease renewal and a NodeReady heartbeat after the restart,
// none of it through the proxy), and the running pod is left alone;
// `egret node check --runtime kubelet` predicts it. A drop-in without the
// API server's address in NO_PROXY sends the kubelet's API requests to the
// proxy, which the check says first. The kubelet gets its own environment
// back at the end.
func TestNodeKubeletDropIn(t *testing.T) {
	n := realnode.Get(t)
	proxyNS := n.NewOutside(t)
	upLog := upstream(t, n, proxyNS, "")
	proxyURL := "http://" + proxyNS.IP + ":3128"
	apiHost := strings.TrimPrefix(n.Config.Host, "https://") // 10.88.0.1:16443
	ctx := context.Background()

	ns := namespace(t, n, "kubeletdropin", nil)
	before := clientPod(t, n, ns, "steady")
	restartKubelet := func(env []string) time.Time {
		t.Helper()
		t0 := time.Now()
		if err := n.RestartKubelet(env); err != nil {
			t.Fatal(err)
		}
		return t0
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			n.RestartKubelet(nil)
		}
	})

	dir := t.TempDir()
	steps := nodeDocSteps(t, "node-kubelet-drop-in", "kubelet")
	egret := func(line string) (string, int) { return nodeEgret(t, n, line, proxyURL, dir, n.KubeletPID()) }
	if out, code := egret(steps[0]); code != 1 || !strings.Contains(out, "has no HTTP_PROXY or HTTPS_PROXY") {
		t.Errorf("egret node check --runtime kubelet before the drop-in: exit %d, want 1 (no proxy)\n%s", code, out)
	}

	// The drop-in: NO_PROXY holds the API server's address (the server of
	// the kubelet's kubeconfig), the node's and the cluster's ranges.
	host, _, _ := strings.Cut(apiHost, ":")
	for _, want := range []string{host, realnode.NodeIP, realnode.PodCIDR, realnode.ServiceCIDR} {
		if !strings.Contains(steps[1], want) {
			t.Errorf("docs/node.md's kubelet render line lacks %s: %s", want, steps[1])
		}
	}
	if out, code := egret(steps[1]); code != 0 {
		t.Fatalf("egret node render --runtime kubelet: exit %d\n%s", code, out)
	}
	env := dropInEnv(t, dir, "kubelet")
	mark := len(upLog.String())
	t0 := restartKubelet(env)
	waitKubeletReachesAPI(t, n, t0)
	t.Logf("the kubelet restarted with the drop-in reached its API server %s after the restart", time.Since(t0).Round(100*time.Millisecond))
	if got := proxyEnviron(t, n.KubeletPID()); !slices.Equal(got, sortedCopy(env)) {
		t.Errorf("the kubelet's environment: %q, want the drop-in's %q", got, env)
	}
	if out, code := egret(steps[3]); code != 0 || !strings.Contains(out, "ok   https://"+apiHost+": direct") {
		t.Errorf("egret node check --runtime kubelet after the drop-in: exit %d, want 0 with its API server direct\n%s", code, out)
	}
	if l := upLog.String()[mark:]; strings.Contains(l, host) {
		t.Errorf("the kubelet's API requests went through the proxy:\n%s", l)
	}
	// The pod ran on, untouched; and the kubelet still runs new ones.
	after, err := n.Client.CoreV1().Pods(ns).Get(ctx, "steady", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := after.Status.ContainerStatuses[0], before.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != 0 || a.State.Running == nil || !a.State.Running.StartedAt.Equal(&b.State.Running.StartedAt) {
		t.Errorf("the kubelet's restart disturbed the running pod: %+v, before %+v", a, b)
	}
	waitPodReady(t, n, ns, "steady", 30*time.Second)
	clientPod(t, n, ns, "new")

	// Without the API server's address in NO_PROXY (rendered with the
	// defaults only): the check says so before the restart, and the
	// restarted kubelet sends its API requests to the proxy.
	bad := strings.Join(strings.Fields(regexp.MustCompile(` --no-proxy \S+`).ReplaceAllString(steps[1], "")), " ")
	if out, code := egret(bad); code != 0 {
		t.Fatalf("%s: exit %d\n%s", bad, code, out)
	}
	badEnv := dropInEnv(t, dir, "kubelet")
	mark = len(upLog.String())
	restartKubelet(badEnv)
	out, code := egret(steps[3])
	if code != 1 || !strings.Contains(out, "FAIL https://"+apiHost+": proxy") || !strings.Contains(out, "add "+host+" to NO_PROXY") {
		t.Errorf("egret node check with the API server outside NO_PROXY: exit %d, want 1 naming the API server and the fix\n%s", code, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := upLog.String()[mark:]
		if line := lastLine(l, host); line != "" {
			t.Logf("the kubelet without its API server in NO_PROXY, at the proxy: %s", line)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the kubelet without its API server in NO_PROXY: no request of its reached the proxy in 30s:\n%s", l)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Its own environment back: no proxy variable, the API reached.
	t0 = restartKubelet(nil)
	restored = true
	waitKubeletReachesAPI(t, n, t0)
	if got := proxyEnviron(t, n.KubeletPID()); len(got) != 0 {
		t.Errorf("the kubelet's environment after the restore: %q, want no proxy variable", got)
	}
	waitPodReady(t, n, ns, "steady", 30*time.Second)
}

// waitKubeletReachesAPI waits until the kubelet, restarted at t0, has
// renewed the node's Lease and sent a NodeReady heartbeat (whole seconds:
// one in a later second than t0).
func waitKubeletReachesAPI(t testing.TB, n *realnode.Node, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	after := t0.Truncate(time.Second).Add(time.Second)
	deadline := time.Now().Add(60 * time.Second)
	var lease, beat time.Time
	for time.Now().Before(deadline) {
		if l, err := n.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, realnode.NodeName, metav1.GetOptions{}); err == nil && l.Spec.RenewTime != nil {
			lease = l.Spec.RenewTime.Time
		}
		if node, err := n.Client.CoreV1().Nodes().Get(ctx, realnode.NodeName, metav1.GetOptions{}); err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					beat = c.LastHeartbeatTime.Time
				}
			}
		}
		if lease.After(t0) && !beat.Before(after) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the kubelet restarted at %s has not reached its API server: Lease renewed %s, NodeReady heartbeat %s", t0.Format(time.RFC3339Nano), lease.Format(time.RFC3339Nano), beat.Format(time.RFC3339))
}

// proxyEnviron is the proxy variables (NAME=VALUE, sorted) in
// /proc/PID/environ.
func proxyEnviron(t testing.TB, pid int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range strings.Split(string(b), "\x00") {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(name), "_proxy") {
			out = append(out, kv)
		}
	}
	slices.Sort(out)
	return out
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

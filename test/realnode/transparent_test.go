package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
	return outsideEgret(t, n, out, nil, "proxy", "--listen", out.IP+":3128", "--admin-listen", "off")
}

// outsideEgret runs egret with args (and env added to the test's) in the
// outside world's namespace, and returns its log once it is ready.
func outsideEgret(t testing.TB, n *realnode.Node, out *realnode.Outside, env []string, args ...string) *testutil.SyncBuffer {
	t.Helper()
	var log testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	cmd := out.Command(ctx, append([]string{n.Egret}, args...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("egret %s in the outside namespace not ready: %s", strings.Join(args, " "), log.String())
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
	// The upstream writes a line when the request or tunnel ends, which
	// may be after the app has its answer.
	if !waitLine(upLog, 0, 10*time.Second, func(l map[string]any) bool { return strings.Contains(fmt.Sprint(l), "origin.example") }) {
		t.Errorf("the upstream did not log origin.example:\n%s", upLog.String())
	}
	if logs := n.KubectlT(t, "logs", "-n", ns, "app", "-c", "egret-proxy"); !strings.Contains(logs, `"transparent"`) {
		t.Errorf("the sidecar did not log a transparent connection:\n%s", logs)
	}

	// The rules live in the pod's network namespace only, once; a
	// restarted app container and a re-created sandbox (the kubelet runs
	// the init containers again, in a new namespace) still capture, with
	// the rules still there once; deleting the pod leaves none behind.
	hostRules := egretRules(t, 0)
	if len(hostRules) != 0 {
		t.Errorf("egret's rules in the host's namespace: %q", hostRules)
	}
	captured := func(when string) {
		t.Helper()
		r := get(t, n, ns, "app", "app", "-direct", "http://origin.example/")
		if r.RemoteIP != out.IP {
			t.Errorf("%s: the app's HTTP reached the origin from %s, not through the upstream %s", when, r.RemoteIP, out.IP)
		}
	}
	first := egretRules(t, podPID(t, pod, "app"))
	if len(first) == 0 {
		t.Fatalf("no egret rules in the pod's namespace")
	}
	onceAfter := func(when string, p *corev1.Pod) {
		t.Helper()
		if got := egretRules(t, podPID(t, p, "app")); !slices.Equal(got, first) {
			t.Errorf("%s: the pod's rules are\n%s\nwant, as at the start,\n%s", when, strings.Join(got, "\n"), strings.Join(first, "\n"))
		}
		captured(when)
	}

	killCgroup(t, pod, containerID(t, pod, "app"))
	pod = waitRestarted(t, n, ns, "app", func(p *corev1.Pod) bool { return statusOf(p, "app").RestartCount >= 1 })
	onceAfter("app container restarted", pod)

	killCgroup(t, pod, sandboxOf(t, pod))
	pod = waitRestarted(t, n, ns, "app", func(p *corev1.Pod) bool { return statusOf(p, "egret-iptables").RestartCount >= 1 })
	onceAfter("sandbox re-created", pod)

	pid := podPID(t, pod, "app")
	netns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	n.KubectlT(t, "delete", "pod", "-n", ns, "app", "--wait", "--timeout=1m")
	if left := egretRules(t, 0); len(left) != 0 {
		t.Errorf("after deletion, egret's rules in the host's namespace: %q", left)
	}
	for deadline := time.Now().Add(30 * time.Second); netnsInUse(netns); time.Sleep(300 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("30 s after deletion, the pod's network namespace %s is still in use", netns)
			break
		}
	}
}

// egretRules lists the nat table's rules and chains that name egret's
// chains (EGRET_*), in the network namespace of pid (0: the host's).
func egretRules(t testing.TB, pid int) []string {
	t.Helper()
	argv := []string{"iptables-save", "-t", "nat"}
	if pid != 0 {
		argv = append([]string{"nsenter", "-t", strconv.Itoa(pid), "-n"}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	var rules []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "EGRET_") {
			// Counters ([packets:bytes]) differ between reads.
			if i := strings.Index(l, " ["); strings.HasPrefix(l, ":") && i > 0 {
				l = l[:i]
			}
			rules = append(rules, l)
		}
	}
	return rules
}

func statusOf(p *corev1.Pod, name string) corev1.ContainerStatus {
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if s.Name == name {
			return s
		}
	}
	return corev1.ContainerStatus{}
}

// containerID is the containerd ID of a running container of p.
func containerID(t testing.TB, p *corev1.Pod, name string) string {
	t.Helper()
	_, id, ok := strings.Cut(statusOf(p, name).ContainerID, "://")
	if !ok {
		t.Fatalf("container %s of %s has no ID", name, p.Name)
	}
	return id
}

// podCgroups are the directories of p's containers in the pids hierarchy
// (cgroup v1, the kubelet's cgroupfs driver: kubepods/<qos>/pod<UID>/<id>).
func podCgroups(t testing.TB, p *corev1.Pod) []string {
	t.Helper()
	var dirs []string
	for _, pat := range []string{"/sys/fs/cgroup/pids/kubepods/*/pod" + string(p.UID) + "/*", "/sys/fs/cgroup/pids/kubepods/pod" + string(p.UID) + "/*"} {
		m, _ := filepath.Glob(pat)
		for _, d := range m {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				dirs = append(dirs, d)
			}
		}
	}
	if len(dirs) == 0 {
		t.Fatalf("no cgroups for pod %s (%s)", p.Name, p.UID)
	}
	return dirs
}

func cgroupPIDs(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// podPID is a process of the running container name of p (its network
// namespace is the pod's).
func podPID(t testing.TB, p *corev1.Pod, name string) int {
	t.Helper()
	id := containerID(t, p, name)
	for _, d := range podCgroups(t, p) {
		if filepath.Base(d) == id {
			if pids := cgroupPIDs(d); len(pids) > 0 {
				return pids[0]
			}
		}
	}
	t.Fatalf("no process of container %s of %s", name, p.Name)
	return 0
}

// sandboxOf is the cgroup name of p's sandbox: the one cgroup of the pod
// that is none of its containers'.
func sandboxOf(t testing.TB, p *corev1.Pod) string {
	t.Helper()
	known := map[string]bool{}
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if _, id, ok := strings.Cut(s.ContainerID, "://"); ok {
			known[id] = true
		}
	}
	for _, d := range podCgroups(t, p) {
		if !known[filepath.Base(d)] && len(cgroupPIDs(d)) > 0 {
			return filepath.Base(d)
		}
	}
	t.Fatalf("no sandbox cgroup for %s", p.Name)
	return ""
}

// killCgroup SIGKILLs the processes of p's container (or sandbox) id.
func killCgroup(t testing.TB, p *corev1.Pod, id string) {
	t.Helper()
	for _, d := range podCgroups(t, p) {
		if filepath.Base(d) == id {
			for _, pid := range cgroupPIDs(d) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			return
		}
	}
	t.Fatalf("no cgroup %s in pod %s", id, p.Name)
}

// waitRestarted waits until done(pod) and the pod is Ready again.
func waitRestarted(t testing.TB, n *realnode.Node, ns, name string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		p, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && done(p) {
			return waitPodReady(t, n, ns, name, time.Until(deadline))
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s did not restart in 2m:\n%s", ns, name, n.KubectlT(t, "describe", "pod", "-n", ns, name))
	return nil
}

// netnsInUse reports whether a process still holds the network namespace
// ns ("net:[inode]").
func netnsInUse(ns string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		if l, err := os.Readlink(p); err == nil && l == ns {
			return true
		}
	}
	return false
}

var _ = exec.Command

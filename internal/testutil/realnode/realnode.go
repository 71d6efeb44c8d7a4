package realnode

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/golden"
)

// The node's fixed facts.
const (
	KubeVersion = "v1.37.2"
	NodeName    = "egret-node"
	NodeIP      = "10.88.0.1" // the bridge's address: node IP, API server, CoreDNS
	PodCIDR     = "10.88.0.0/16"
	ServiceCIDR = "10.96.0.0/16"
	DNSIP       = "10.96.0.10"
	Bridge      = "egretnode0"
	Chain       = "EGRET-NODE" // filter FORWARD: what may leave the bridge
	// Images the harness imports. EgretImage is the tag deploy/base pins,
	// so the shipped manifests run the image built from this tree.
	EgretImage         = "ghcr.io/egret-io/egret:0.1.0"
	EgretIptablesImage = EgretImage + "-iptables"
	ClientImage        = "localhost/client:1" // busybox + /bin/get (a Go HTTP client)
	PauseImage         = "localhost/pause:1"

	apiPort  = "16443"
	dnsPort  = "1053"
	workDir  = "/var/tmp/egret-realnode"
	runDir   = "/run/egret-realnode"
	lockFile = "/run/egret-realnode.lock"
)

// kubeletSysctls are set by the kubelet at start; the harness puts them back.
var hostSysctls = []string{
	"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables", "vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops",
	"net/ipv4/conf/all/route_localnet", "net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established", "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
}

// hardcoded are paths the kubelet and containerd create whatever they are
// told; the harness removes those that did not exist before it.
var hardcoded = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/opt/containerd", "/run/containerd", "/var/lib/cni", "/etc/cni"}

// Node is a running single-node cluster.
type Node struct {
	Dir        string // work directory (logs under Dir/logs)
	Kubeconfig string // admin (system:masters)
	Kubectl    string // the kubectl binary
	Config     *rest.Config
	Client     kubernetes.Interface
	Egret      string // the stamped egret binary in the images
	BinDir     string // the kube binaries
	CACert     string // the cluster CA (API server, kubelet)

	mu    sync.Mutex
	procs map[string]*exec.Cmd
	done  map[*exec.Cmd]chan struct{} // closed when the process is reaped
	st    state
	lock  *os.File
}

// state is what a crashed run must undo; written to workDir/state.json.
type state struct {
	Sysctls map[string]string `json:"sysctls"`
	Created []string          `json:"created"`
	Netns   []string          `json:"netns"` // /run/netns entries present before
	Pids    []int             `json:"pids"`
	Veths   []string          `json:"veths"`
	// KubeFirewall: the chain KUBE-FIREWALL existed before the node
	// (kube-proxy adds it to INPUT and OUTPUT, and --cleanup leaves it).
	KubeFirewall bool `json:"kubeFirewall"`
}

type errMissing string

func (e errMissing) Error() string { return string(e) }

var (
	current  *Node
	skipWhy  string
	startErr error
)

// Main brings the node up, runs the tests, takes it down; for TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(realnode.Main(m)) }
func Main(m *testing.M) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		skipWhy = "real-node tests do not run under -short"
		return golden.After(m.Run())
	}
	start := time.Now()
	n, err := Start()
	switch {
	case err == nil:
		current = n
		fmt.Fprintf(os.Stderr, "realnode: node %s (Kubernetes %s) ready in %s\n", NodeName, KubeVersion, time.Since(start).Round(10*time.Millisecond))
	case errors.As(err, new(errMissing)):
		skipWhy = err.Error()
	default:
		startErr = err
	}
	code := m.Run()
	if current != nil {
		t0 := time.Now()
		current.Stop()
		fmt.Fprintf(os.Stderr, "realnode: node stopped and host restored in %s\n", time.Since(t0).Round(10*time.Millisecond))
	}
	testutil.RemoveEgretBinary()
	return golden.After(code)
}

// Get returns the node, or skips the test (fails it under
// EGRET_REQUIRE_ALL=1) when the host cannot run one, or fails it when the
// node did not come up.
func Get(t testing.TB) *Node {
	t.Helper()
	if current != nil {
		return current
	}
	if startErr != nil {
		t.Fatalf("real node: %v", startErr)
	}
	if skipWhy == "" {
		t.Fatal("realnode: no node; call realnode.Main from TestMain")
	}
	if testing.Short() {
		t.Skip(skipWhy)
	}
	testutil.Missing(t, skipWhy)
	return nil
}

// prerequisites says what is missing, or "".
func prerequisites(bin string) string {
	if os.Geteuid() != 0 {
		return "real node: needs root (bridge, iptables, containerd, kubelet)"
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "coredns"} {
		if fi, err := os.Stat(filepath.Join(bin, b)); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Sprintf("real node: %s not found in %s (run scripts/deps/30-kube.sh and 31-node.sh, or make test-deps)", b, bin)
		}
	}
	for _, p := range []string{"/usr/bin/containerd", "/usr/bin/ctr", "/usr/bin/containerd-shim-runc-v2", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "/bin/busybox"} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Sprintf("real node: %s not found (Debian packages containerd runc containernetworking-plugins busybox-static: scripts/deps/31-node.sh)", p)
		}
	}
	for _, t := range []string{"ip", "iptables", "go"} {
		if _, err := exec.LookPath(t); err != nil {
			return "real node: " + t + " not found"
		}
	}
	if _, err := os.Stat(filepath.Join(testutil.CacheDir(), "image-debs")); err != nil {
		return "real node: " + filepath.Join(testutil.CacheDir(), "image-debs") + " not found (scripts/deps/25-image-debs.sh)"
	}
	// Can this kernel make a bridge? (A container without NET_ADMIN cannot.)
	probe := "egretprobe0"
	if out, err := exec.Command("ip", "link", "add", probe, "type", "bridge").CombinedOutput(); err != nil {
		return "real node: cannot create a bridge (needs NET_ADMIN): " + strings.TrimSpace(string(out))
	}
	exec.Command("ip", "link", "del", probe).Run()
	return ""
}

// Start brings the node up. Stop it with Stop.
func Start() (n *Node, err error) {
	bin := filepath.Join(testutil.CacheDir(), "kube", KubeVersion)
	if why := prerequisites(bin); why != "" {
		return nil, errMissing(why)
	}
	lock, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, err
	}
	n = &Node{Dir: workDir, BinDir: bin, Kubectl: filepath.Join(bin, "kubectl"), procs: map[string]*exec.Cmd{}, lock: lock}
	// A run that crashed left its state: undo it first.
	n.undoLeftovers()
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, tails(filepath.Join(workDir, "logs"), 15))
			n.Stop()
			n = nil
		}
	}()
	for _, d := range []string{workDir, runDir, filepath.Join(workDir, "logs"), filepath.Join(workDir, "pki"), filepath.Join(workDir, "net.d"), filepath.Join(workDir, "certs.d"), filepath.Join(workDir, "images")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return n, err
		}
	}
	n.st.Sysctls = map[string]string{}
	for _, k := range hostSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			n.st.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range hardcoded {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			n.st.Created = append(n.st.Created, p)
		}
	}
	n.st.Netns, _ = filepath.Glob("/run/netns/*")
	n.st.KubeFirewall = exec.Command("iptables", "-w", "-S", "KUBE-FIREWALL").Run() == nil
	if err := n.saveState(); err != nil {
		return n, err
	}
	if err := n.pkiAndConfigs(); err != nil {
		return n, err
	}
	if err := n.network(); err != nil {
		return n, err
	}
	images := make(chan error, 1)
	go func() { images <- n.buildImages() }()

	if err := n.startContainerd(); err != nil {
		return n, err
	}
	if err := n.startControlPlane(); err != nil {
		return n, err
	}
	if err := <-images; err != nil {
		return n, err
	}
	if err := n.importImages(); err != nil {
		return n, err
	}
	if err := n.startNode(); err != nil {
		return n, err
	}
	return n, nil
}

func (n *Node) path(p ...string) string { return filepath.Join(append([]string{workDir}, p...)...) }

func (n *Node) saveState() error {
	b, _ := json.MarshalIndent(n.st, "", "  ")
	return os.WriteFile(n.path("state.json"), b, 0o600)
}

// run runs a command and returns its combined output, the error naming it.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (n *Node) pkiAndConfigs() error {
	dir := n.path("pki")
	p, err := newPKI(dir)
	if err != nil {
		return err
	}
	n.CACert = filepath.Join(dir, "ca.crt")
	for _, c := range []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "127.0.0.1", NodeIP, "10.96.0.1"}},
		{"kubelet", NodeName, nil, []string{NodeName, NodeIP}},
		{"admin", "admin", []string{"system:masters"}, nil},
		{"node", "system:node:" + NodeName, []string{"system:nodes"}, nil},
	} {
		if err := p.issue(c.name, c.cn, c.orgs, c.hosts...); err != nil {
			return err
		}
	}
	if err := p.saKey(); err != nil {
		return err
	}
	for _, k := range []struct{ name, user string }{{"admin", "admin"}, {"node", "node"}} {
		kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: egret-node
  cluster: {server: "https://%s:%s", certificate-authority: %s}
users:
- name: u
  user: {client-certificate: %s, client-key: %s}
contexts:
- name: egret-node
  context: {cluster: egret-node, user: u, namespace: default}
current-context: egret-node
`, NodeIP, apiPort, n.CACert, filepath.Join(dir, k.user+".crt"), filepath.Join(dir, k.user+".key"))
		if err := os.WriteFile(n.path(k.name+".kubeconfig"), []byte(kc), 0o600); err != nil {
			return err
		}
	}
	n.Kubeconfig = n.path("admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", n.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	n.Config = cfg
	n.Client, err = kubernetes.NewForConfig(cfg)
	return err
}

// network makes the bridge, enables forwarding and confines the bridge.
func (n *Node) network() error {
	for _, c := range [][]string{
		{"ip", "link", "add", Bridge, "type", "bridge"},
		{"ip", "addr", "add", NodeIP + "/16", "dev", Bridge},
		{"ip", "link", "set", Bridge, "up"},
		{"iptables", "-w", "-N", Chain},
		{"iptables", "-w", "-A", Chain, "-i", Bridge, "!", "-o", Bridge, "-j", "DROP"},
		{"iptables", "-w", "-I", "FORWARD", "1", "-j", Chain},
	} {
		if _, err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return err
	}
	// Service traffic between two pods of the bridge: the reply is bridged,
	// and only br_netfilter lets conntrack undo kube-proxy's DNAT.
	if err := os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("br_netfilter (net.bridge.bridge-nf-call-iptables): %w", err)
	}
	conf := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "egret-node", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": %q,
            "ranges": [[{"subnet": %q, "rangeStart": "10.88.1.1", "rangeEnd": "10.88.127.254", "gateway": %q}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}]}`, Bridge, n.path("cni-ipam"), PodCIDR, NodeIP)
	return os.WriteFile(n.path("net.d", "10-egret-node.conflist"), []byte(conf), 0o644)
}

// logFile opens Dir/logs/name.log for appending.
func (n *Node) logFile(name string) (*os.File, error) {
	return os.OpenFile(n.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

// spawn starts a daemon in its own process group, output to its log.
func (n *Node) spawn(name string, env []string, argv ...string) error {
	lf, err := n.logFile(name)
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	n.mu.Lock()
	n.procs[name] = cmd
	if n.done == nil {
		n.done = map[*exec.Cmd]chan struct{}{}
	}
	n.done[cmd] = done
	n.st.Pids = append(n.st.Pids, cmd.Process.Pid)
	n.mu.Unlock()
	go func() { cmd.Wait(); lf.Close(); close(done) }()
	return n.saveState()
}

// stop ends a daemon: SIGTERM, then SIGKILL after grace.
func (n *Node) stop(name string, grace time.Duration) {
	n.mu.Lock()
	cmd := n.procs[name]
	delete(n.procs, name)
	done := n.done[cmd]
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil || done == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// Restart stops and starts a daemon with other environment variables
// appended (e.g. containerd with proxy settings). Only containerd.
func (n *Node) RestartContainerd(extraEnv []string) error {
	n.stop("containerd", 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	return n.startContainerdEnv(extraEnv)
}

func waitFor(what string, timeout time.Duration, ok func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = ok(); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %v", what, timeout, err)
}

func baseEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
}

// ContainerdSocket is the private containerd's socket.
func ContainerdSocket() string { return filepath.Join(runDir, "containerd.sock") }

func (n *Node) startContainerd() error { return n.startContainerdEnv(nil) }

func (n *Node) startContainerdEnv(extraEnv []string) error {
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, n.path("containerd"), filepath.Join(runDir, "containerd"), ContainerdSocket(), filepath.Join(runDir, "containerd-ttrpc.sock"),
		PauseImage, n.path("net.d"), n.path("certs.d"))
	if err := os.WriteFile(n.path("containerd.toml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	env := append(baseEnv(), extraEnv...)
	if err := n.spawn("containerd", env, "/usr/bin/containerd", "--config", n.path("containerd.toml")); err != nil {
		return err
	}
	return waitFor("containerd", 30*time.Second, func() error {
		_, err := n.Ctr("version")
		return err
	})
}

// Ctr runs ctr against the node's containerd, namespace k8s.io.
func (n *Node) Ctr(args ...string) (string, error) {
	return run("/usr/bin/ctr", append([]string{"--address", ContainerdSocket(), "-n", "k8s.io"}, args...)...)
}

func (n *Node) startControlPlane() error {
	pki := n.path("pki")
	etcdPort, peerPort := freePort(), freePort()
	if err := n.spawn("etcd", baseEnv(), filepath.Join(n.BinDir, "etcd"),
		"--data-dir", n.path("etcd"), "--name", "egret-node",
		"--listen-client-urls", "http://127.0.0.1:"+etcdPort, "--advertise-client-urls", "http://127.0.0.1:"+etcdPort,
		"--listen-peer-urls", "http://127.0.0.1:"+peerPort, "--initial-advertise-peer-urls", "http://127.0.0.1:"+peerPort,
		"--initial-cluster", "egret-node=http://127.0.0.1:"+peerPort, "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return err
	}
	pf := func(s string) string { return filepath.Join(pki, s) }
	if err := n.spawn("kube-apiserver", baseEnv(), filepath.Join(n.BinDir, "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:"+etcdPort,
		"--bind-address", NodeIP, "--advertise-address", NodeIP, "--secure-port", apiPort,
		"--tls-cert-file", pf("apiserver.crt"), "--tls-private-key-file", pf("apiserver.key"),
		"--client-ca-file", pf("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", pf("sa.pub"), "--service-account-signing-key-file", pf("sa.key"),
		"--service-cluster-ip-range", ServiceCIDR,
		"--authorization-mode", "Node,RBAC", "--allow-privileged",
		"--kubelet-client-certificate", pf("admin.crt"), "--kubelet-client-key", pf("admin.key"),
		"--kubelet-preferred-address-types", "InternalIP",
		"--profiling=false", "--v=1"); err != nil {
		return err
	}
	ctx := context.Background()
	if err := waitFor("kube-apiserver", 120*time.Second, func() error {
		b, err := n.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%v %s", err, b)
		}
		return nil
	}); err != nil {
		return err
	}
	kc := n.path("admin.kubeconfig")
	if err := n.spawn("kube-controller-manager", baseEnv(), filepath.Join(n.BinDir, "kube-controller-manager"),
		"--kubeconfig", kc, "--secure-port", "0", "--leader-elect=false",
		"--service-account-private-key-file", pf("sa.key"), "--root-ca-file", pf("ca.crt"),
		"--cluster-signing-cert-file", pf("ca.crt"), "--cluster-signing-key-file", pf("ca.key"),
		"--service-cluster-ip-range", ServiceCIDR, "--use-service-account-credentials=false",
		// The node's Spec.PodCIDR is the bridge's network (discovery reads it).
		"--allocate-node-cidrs", "--cluster-cidr", PodCIDR, "--node-cidr-mask-size", "16", "--v=1"); err != nil {
		return err
	}
	return n.spawn("kube-scheduler", baseEnv(), filepath.Join(n.BinDir, "kube-scheduler"),
		"--kubeconfig", kc, "--secure-port", "0", "--leader-elect=false", "--v=1")
}

func (n *Node) buildImages() error {
	dir := n.path("images")
	pause, err := goBuild(dir, "pause", pauseSource)
	if err != nil {
		return err
	}
	pb, _ := os.ReadFile(pause)
	if err := dockerArchive(filepath.Join(dir, "pause.tar"), PauseImage, []string{"/pause"}, []file{{path: "pause", mode: 0o755, data: pb}}); err != nil {
		return err
	}
	get, err := goBuild(dir, "get", getSource)
	if err != nil {
		return err
	}
	files, err := busyboxFiles()
	if err != nil {
		return err
	}
	gb, _ := os.ReadFile(get)
	files = append(files, file{path: "bin/get", mode: 0o755, data: gb})
	if err := dockerArchive(filepath.Join(dir, "client.tar"), ClientImage, []string{"/bin/sleep", "2147483647"}, files); err != nil {
		return err
	}
	// egret's images, with the project's image builder and a stamped
	// binary, as `make image` / `make image-iptables` make them.
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	const version, commit = "0.1.0-realnode", "0000000000000000000000000000000000000000"
	n.Egret = filepath.Join(dir, "egret")
	vp := "egret.io/egret/internal/version"
	cmd := exec.Command("go", "build", "-trimpath", "-o", n.Egret, "-ldflags",
		fmt.Sprintf("-s -w -X %s.version=%s -X %s.commit=%s -X %s.dirty=false -X %s.date=1970-01-01T00:00:00Z", vp, version, vp, commit, vp, vp),
		"./cmd/egret")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build egret: %v\n%s", err, out)
	}
	debs := filepath.Join(testutil.CacheDir(), "image-debs")
	for _, img := range []struct{ tag, out string }{{EgretImage, "egret"}, {EgretIptablesImage, "egret-iptables"}} {
		args := []string{"run", "./deploy/image", "-binary", "linux/amd64=" + n.Egret, "-debs", debs,
			"-version", version, "-revision", commit, "-created", "1970-01-01T00:00:00Z",
			"-o", filepath.Join(dir, img.out+"-oci"), "-tag", img.tag}
		if img.out == "egret-iptables" {
			args = append(args, "-iptables-debs", debs)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if _, err := run("tar", "-C", filepath.Join(dir, img.out+"-oci"), "-cf", filepath.Join(dir, img.out+".tar"), "."); err != nil {
			return err
		}
	}
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not in the egret module")
	}
	return filepath.Dir(gomod), nil
}

func (n *Node) importImages() error {
	dir := n.path("images")
	for _, f := range []string{"pause.tar", "client.tar"} {
		if _, err := n.Ctr("images", "import", filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	for _, f := range []string{"egret.tar", "egret-iptables.tar"} {
		if _, err := n.Ctr("images", "import", "--all-platforms", filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	out, err := n.Ctr("images", "ls", "-q")
	if err != nil {
		return err
	}
	for _, want := range []string{PauseImage, ClientImage, EgretImage, EgretIptablesImage} {
		if !slices.Contains(strings.Fields(out), want) && !slices.Contains(strings.Fields(out), "docker.io/"+want) {
			return fmt.Errorf("image %s not imported; containerd has: %s", want, out)
		}
	}
	return nil
}

// startNode starts CoreDNS, kube-proxy and the kubelet and waits for the
// node to be Ready.
func (n *Node) startNode() error {
	ctx := context.Background()
	// CoreDNS on the host, behind Service kube-dns (kube-proxy DNATs
	// 10.96.0.10:53 to 10.88.0.1:1053). Names outside the cluster come
	// only from its hosts file (AddHost); nothing is forwarded.
	if err := os.WriteFile(n.path("hosts"), nil, 0o644); err != nil {
		return err
	}
	healthPort, readyPort := freePort(), freePort()
	corefile := fmt.Sprintf(`.:%s {
    bind %s
    ready 127.0.0.1:%s
    health 127.0.0.1:%s
    errors
    cache 5
    hosts %s {
        reload 1s
        fallthrough
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
    }
}
`, dnsPort, NodeIP, readyPort, healthPort, n.path("hosts"), n.Kubeconfig)
	if err := os.WriteFile(n.path("Corefile"), []byte(corefile), 0o644); err != nil {
		return err
	}
	if err := n.spawn("coredns", baseEnv(), filepath.Join(n.BinDir, "coredns"), "-conf", n.path("Corefile")); err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{ClusterIP: DNSIP, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(1053)},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(1053)},
		}},
	}
	if _, err := n.Client.CoreV1().Services("kube-system").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create kube-dns: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kube-dns-host", Namespace: "kube-system", Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{NodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Port: ptr.To[int32](1053), Protocol: ptr.To(corev1.ProtocolUDP)},
			{Name: ptr.To("dns-tcp"), Port: ptr.To[int32](1053), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
	if _, err := n.Client.DiscoveryV1().EndpointSlices("kube-system").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create kube-dns endpoints: %w", err)
	}

	proxyCfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
nodePortAddresses: ["%s/32"]
healthzBindAddress: "127.0.0.1:%s"
metricsBindAddress: "127.0.0.1:%s"
iptables: {masqueradeAll: false, localhostNodePorts: false, syncPeriod: 10s, minSyncPeriod: 0s}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, n.Kubeconfig, NodeName, PodCIDR, NodeIP, freePort(), freePort())
	if err := os.WriteFile(n.path("kube-proxy.yaml"), []byte(proxyCfg), 0o644); err != nil {
		return err
	}
	if err := n.spawn("kube-proxy", baseEnv(), filepath.Join(n.BinDir, "kube-proxy"), "--config", n.path("kube-proxy.yaml"), "--v=1"); err != nil {
		return err
	}

	// The kubelet: PATH without iptables (it would add KUBE-FIREWALL to the
	// host's INPUT and OUTPUT every minute).
	pathDir := n.path("kubelet-path")
	os.MkdirAll(pathDir, 0o755)
	for _, tool := range []string{"mount", "umount", "losetup", "nsenter", "findmnt", "blkid", "du", "find", "nice", "ionice"} {
		if p, err := exec.LookPath(tool); err == nil {
			os.Symlink(p, filepath.Join(pathDir, tool))
		}
	}
	pki := n.path("pki")
	kcfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzPort: 0
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  x509: {clientCAFile: %s}
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDNS: [%s]
clusterDomain: cluster.local
resolvConf: ""
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: %s
imagePullCredentialsVerificationPolicy: NeverVerify
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
`, ContainerdSocket(), ContainerdSocket(), NodeIP, filepath.Join(pki, "kubelet.crt"), filepath.Join(pki, "kubelet.key"),
		filepath.Join(pki, "ca.crt"), DNSIP, n.path("pods"))
	if err := os.WriteFile(n.path("kubelet.yaml"), []byte(kcfg), 0o644); err != nil {
		return err
	}
	if err := n.startKubelet(nil); err != nil {
		return err
	}
	if err := waitFor("node "+NodeName, 120*time.Second, func() error {
		node, err := n.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("not Ready")
	}); err != nil {
		return err
	}
	// The kubelet set its sysctls at start; put the host's back.
	n.restoreSysctls(false)
	if err := waitFor("kube-proxy rules", 60*time.Second, func() error {
		_, err := run("iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES")
		return err
	}); err != nil {
		return err
	}
	if err := waitFor("coredns", 30*time.Second, func() error {
		resp, err := http.Get("http://127.0.0.1:" + readyPort + "/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return errors.New(resp.Status)
		}
		return nil
	}); err != nil {
		return err
	}
	return waitFor("service account default/default", 60*time.Second, func() error {
		_, err := n.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// startKubelet starts the kubelet with its PATH (the tools it needs, not
// iptables) and HOME, and extraEnv after them.
func (n *Node) startKubelet(extraEnv []string) error {
	env := append([]string{"PATH=" + n.path("kubelet-path"), "HOME=/root"}, extraEnv...)
	return n.spawn("kubelet", env, filepath.Join(n.BinDir, "kubelet"),
		"--config", n.path("kubelet.yaml"), "--kubeconfig", n.path("node.kubeconfig"),
		"--root-dir", n.path("kubelet"), "--hostname-override", NodeName, "--node-ip", NodeIP, "--v=1")
}

// RestartKubelet stops the kubelet and starts it again with extraEnv
// appended to its environment, as systemctl restart applies a drop-in's
// Environment= lines; RestartKubelet(nil) gives it back its own. Pods keep
// running (their containers belong to containerd). It returns once the new
// process runs, and puts back the sysctls the kubelet sets at start; the
// caller waits for what it needs (the node's Lease renewed, say).
func (n *Node) RestartKubelet(extraEnv []string) error {
	n.stop("kubelet", 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	logPath := n.path("logs", "kubelet.log")
	var from int64
	if fi, err := os.Stat(logPath); err == nil {
		from = fi.Size()
	}
	if err := n.startKubelet(extraEnv); err != nil {
		return err
	}
	// The kubelet writes its sysctls when its container manager starts,
	// before its eviction manager (whether or not it reaches the API
	// server): put the host's back after that.
	err := waitFor("the restarted kubelet's container manager", 60*time.Second, func() error {
		b, err := os.ReadFile(logPath)
		if err != nil {
			return err
		}
		if int64(len(b)) < from || !strings.Contains(string(b[from:]), "Eviction manager: starting control loop") {
			return errors.New("not started yet")
		}
		return nil
	})
	n.restoreSysctls(false)
	return err
}

// restoreSysctls writes back the saved values that differ (ip_forward
// too when all).
func (n *Node) restoreSysctls(all bool) {
	for k, v := range n.st.Sysctls {
		if (k == "net/ipv4/ip_forward" || k == "net/bridge/bridge-nf-call-iptables") && !all {
			continue
		}
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil && strings.TrimSpace(string(b)) != v {
			os.WriteFile("/proc/sys/"+k, []byte(v), 0o644)
		}
	}
}

// AddHost makes CoreDNS answer name with ip alone (its hosts file,
// reloaded within a second or two; answers are cached 5 s). An earlier
// test's entry for name is replaced, not kept beside it: CoreDNS would
// answer both addresses, and a client that dials only the first (Java's
// HttpClient) would reach for the earlier test's gone namespace.
func (n *Node) AddHost(name, ip string) error {
	file := n.path("hosts")
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var out strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && slices.Contains(f[1:], name) {
			continue
		}
		out.WriteString(line)
	}
	fmt.Fprintf(&out, "%s %s\n", ip, name)
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(out.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// AllowOut lets traffic from the bridge leave through host interface
// iface (a veth to a test's network namespace), until Stop.
func (n *Node) AllowOut(iface string) error {
	_, err := run("iptables", "-w", "-I", Chain, "1", "-i", Bridge, "-o", iface, "-j", "ACCEPT")
	return err
}

// Stop takes the node down and restores the host: pods' containers and
// network namespaces, daemons, mounts, cgroups, the bridge, iptables rules,
// sysctls, and the directories the kubelet and containerd created.
func (n *Node) Stop() {
	if n == nil {
		return
	}
	n.stop("kubelet", 10*time.Second)
	n.killContainers()
	for _, d := range []string{"kube-proxy", "coredns", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "containerd"} {
		n.stop(d, 10*time.Second)
	}
	n.cleanHost()
	os.Remove(filepath.Join(workDir, "state.json"))
	if n.lock != nil {
		syscall.Flock(int(n.lock.Fd()), syscall.LOCK_UN)
		n.lock.Close()
		n.lock = nil
	}
}

// killContainers kills every process of the pods (whatever runs in the
// kubelet's kubepods cgroups: sandboxes and containers), which ends their
// tasks, fast and without the API.
func (n *Node) killContainers() {
	for i := 0; i < 3; i++ {
		if killCgroupProcs() == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killCgroupProcs SIGKILLs the processes in the kubepods cgroups and says
// how many there were.
func killCgroupProcs() int {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if fi, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && fi.IsDir() {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	seen := 0
	for _, r := range roots {
		filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					syscall.Kill(pid, syscall.SIGKILL)
					seen++
				}
			}
			return nil
		})
	}
	return seen
}

// cleanHost undoes what the node changed on the host, from n.st.
func (n *Node) cleanHost() {
	// Leftover processes of this node (by pid, only if they still are ours)
	// and shims serving its containerd.
	for _, pid := range n.st.Pids {
		if ours(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	n.killContainers()
	n.killShims()
	// Mounts under the node's directories and the hardcoded ones, deepest first.
	unmountUnder(append([]string{workDir, runDir}, n.st.Created...)...)
	// Pod network namespaces made during the run.
	now, _ := filepath.Glob("/run/netns/*")
	for _, ns := range now {
		if !slices.Contains(n.st.Netns, ns) && strings.HasPrefix(filepath.Base(ns), "cni-") {
			exec.Command("ip", "netns", "delete", filepath.Base(ns)).Run()
		}
	}
	for _, v := range n.st.Veths {
		exec.Command("ip", "link", "del", v).Run()
	}
	exec.Command("ip", "link", "del", Bridge).Run()
	// kube-proxy's rules (iptables and nftables), then ours.
	if _, err := os.Stat(filepath.Join(n.BinDir, "kube-proxy")); err == nil {
		exec.Command(filepath.Join(n.BinDir, "kube-proxy"), "--cleanup").Run()
	}
	for exec.Command("iptables", "-w", "-D", "FORWARD", "-j", Chain).Run() == nil {
	}
	if !n.st.KubeFirewall {
		for _, c := range []string{"INPUT", "OUTPUT"} {
			for exec.Command("iptables", "-w", "-D", c, "-j", "KUBE-FIREWALL").Run() == nil {
			}
		}
		exec.Command("iptables", "-w", "-F", "KUBE-FIREWALL").Run()
		exec.Command("iptables", "-w", "-X", "KUBE-FIREWALL").Run()
	}
	exec.Command("iptables", "-w", "-F", Chain).Run()
	exec.Command("iptables", "-w", "-X", Chain).Run()
	removeCgroups()
	n.restoreSysctls(true)
	for _, p := range n.st.Created {
		os.RemoveAll(p)
	}
	os.RemoveAll(runDir)
	// Keep the logs of the last run; remove the rest of the work directory.
	entries, _ := os.ReadDir(workDir)
	for _, e := range entries {
		if e.Name() != "logs" {
			os.RemoveAll(filepath.Join(workDir, e.Name()))
		}
	}
}

// undoLeftovers undoes a crashed run's changes, from its state file.
func (n *Node) undoLeftovers() {
	b, err := os.ReadFile(filepath.Join(workDir, "state.json"))
	if err == nil {
		json.Unmarshal(b, &n.st)
	}
	n.cleanHost()
	os.RemoveAll(filepath.Join(workDir, "logs"))
	n.st = state{}
}

// ours reports whether pid runs a program of the node (its command line
// names the node's directories or binaries).
func ours(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	s := string(b)
	return strings.Contains(s, workDir) || strings.Contains(s, runDir) || strings.Contains(s, filepath.Join("kube", KubeVersion))
}

// killShims kills containerd-shim processes started for the node's
// containerd (their command line names its socket).
func (n *Node) killShims() {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "containerd-shim") || !strings.Contains(string(b), runDir) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func unmountUnder(prefixes ...string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var targets []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		t := strings.ReplaceAll(fields[4], `\040`, " ")
		for _, p := range prefixes {
			if t == p || strings.HasPrefix(t, p+"/") {
				targets = append(targets, t)
				break
			}
		}
	}
	f.Close()
	sort.Slice(targets, func(i, j int) bool { return len(targets[i]) > len(targets[j]) })
	for _, t := range targets {
		if syscall.Unmount(t, 0) != nil {
			syscall.Unmount(t, syscall.MNT_DETACH)
		}
	}
}

// removeCgroups removes the kubepods hierarchies the kubelet made (empty
// once every container is gone), deepest first.
func removeCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if fi, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && fi.IsDir() {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	for _, r := range roots {
		var dirs []string
		filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
	}
}

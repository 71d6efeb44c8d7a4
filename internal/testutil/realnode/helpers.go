package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
)

func freePort() string {
	p, err := testutil.PickPort(testutil.ListenCheck(net.Listen, "127.0.0.1"))
	if err != nil {
		panic(err)
	}
	return p
}

// tails returns the last lines of each log in dir.
func tails(dir string, lines int) string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil || len(data) == 0 {
			continue
		}
		ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(ls) > lines {
			ls = ls[len(ls)-lines:]
		}
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", l, len(ls), strings.Join(ls, "\n"))
	}
	return b.String()
}

// KubectlCmd is kubectl with the admin kubeconfig.
func (n *Node) KubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, n.Kubectl, append([]string{"--kubeconfig", n.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.Kubeconfig)
	return cmd
}

// Kubectl runs kubectl and returns its standard output; it fails the test
// on a non-zero exit, with the output.
func (n *Node) KubectlT(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := n.KubectlCmd(ctx, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// Outside is a network namespace of the test's own, reachable from the
// node's pods through the host (routed, not bridged): the "outside world".
type Outside struct {
	*netns.NS
	IP     string // its address
	HostIF string // the host's end of its veth
}

var outsideSeq int

// NewOutside makes an outside namespace with address 198.51.100.(4k+2)/30,
// routes between it and the pod network, and lets the node's pods reach it.
// Removed when the test ends.
func (n *Node) NewOutside(t testing.TB) *Outside {
	t.Helper()
	ns := netns.New(t, "outside")
	outsideSeq++
	if outsideSeq > 60 {
		t.Fatal("realnode: too many outside namespaces")
	}
	base := 4 * outsideSeq
	hostIP, nsIP := fmt.Sprintf("198.51.100.%d", base+1), fmt.Sprintf("198.51.100.%d", base+2)
	b := make([]byte, 3)
	rand.Read(b)
	hostIF, peer := "egro"+hex.EncodeToString(b), "egrp"+hex.EncodeToString(b)
	for _, c := range [][]string{
		{"ip", "link", "add", hostIF, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", ns.Name},
		{"ip", "addr", "add", hostIP + "/30", "dev", hostIF},
		{"ip", "link", "set", hostIF, "up"},
		{"ip", "-n", ns.Name, "addr", "add", nsIP + "/30", "dev", peer},
		{"ip", "-n", ns.Name, "link", "set", peer, "up"},
		{"ip", "-n", ns.Name, "route", "add", PodCIDR, "via", hostIP},
	} {
		if _, err := run(c[0], c[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	n.mu.Lock()
	n.st.Veths = append(n.st.Veths, hostIF)
	n.mu.Unlock()
	n.saveState()
	if err := n.AllowOut(hostIF); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("iptables", "-w", "-D", Chain, "-i", Bridge, "-o", hostIF, "-j", "ACCEPT").Run()
		exec.Command("ip", "link", "del", hostIF).Run()
	})
	return &Outside{NS: ns, IP: nsIP, HostIF: hostIF}
}

// ContainerdPID is the pid of the node's containerd.
func (n *Node) ContainerdPID() int { return n.pid("containerd") }

// KubeletPID is the pid of the node's kubelet.
func (n *Node) KubeletPID() int { return n.pid("kubelet") }

func (n *Node) pid(daemon string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.procs[daemon]; c != nil && c.Process != nil {
		return c.Process.Pid
	}
	return 0
}

// ImageArchive is the docker-archive of one of the images the harness
// built: "client", "pause", or the OCI layout tars "egret", "egret-iptables".
func (n *Node) ImageArchive(name string) string {
	return filepath.Join(workDir, "images", name+".tar")
}

// CertsDir is containerd's registry configuration directory (config_path):
// DIR/<host:port>/hosts.toml.
func CertsDir() string { return filepath.Join(workDir, "certs.d") }

//go:build linux

package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"egret.io/egret/internal/testutil"
)

// NS is one network namespace created by New. Its loopback interface is up.
type NS struct {
	// Name is the namespace name as `ip netns` knows it
	// (/var/run/netns/Name).
	Name string
}

// Require skips t under -short, and unless it runs as root on Linux with
// the ip tool and the other named tools on PATH; with EGRET_REQUIRE_ALL=1 a
// missing prerequisite fails the test instead.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespace test: skipped under -short")
	}
	if os.Geteuid() != 0 {
		testutil.Missing(t, "network namespace tests need root")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Missing(t, fmt.Sprintf("%s not found (run `make test-deps`)", tool))
		}
	}
}

var labelRE = regexp.MustCompile(`[^a-z0-9]+`)

// New creates a fresh network namespace, brings its loopback up and deletes
// the namespace when t ends. label (for example "pod") becomes part of the
// name, with the pid and a random suffix: egret-pod-12345-a1b2c3.
func New(t testing.TB, label string) *NS {
	t.Helper()
	Require(t)
	label = strings.Trim(labelRE.ReplaceAllString(strings.ToLower(label), "-"), "-")
	if len(label) > 16 {
		label = label[:16]
	}
	name := fmt.Sprintf("egret-%s-%d-%s", label, os.Getpid(), randHex(3))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	n := &NS{Name: name}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", name, err, out)
		}
	})
	n.Run(t, "ip", "link", "set", "lo", "up")
	return n
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Command returns a command that runs argv inside the namespace
// (`ip netns exec NAME argv...`).
func (n *NS) Command(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name}, argv...)...)
}

// CommandAs is Command with the process running as uid and gid, no
// supplementary groups (setpriv from util-linux).
func (n *NS) CommandAs(ctx context.Context, uid, gid int, argv ...string) *exec.Cmd {
	args := []string{"setpriv", "--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(gid), "--clear-groups", "--"}
	return n.Command(ctx, append(args, argv...)...)
}

// Run runs argv inside the namespace, fails t if it fails, and returns its
// standard output.
func (n *NS) Run(t testing.TB, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := n.Command(ctx, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("in %s: %s: %v: %s", n.Name, strings.Join(argv, " "), err, stderr.String())
	}
	return stdout.String()
}

// WriteEtc makes content the namespace's /etc/<file> (hosts, resolv.conf,
// ...) for the commands Command starts: `ip netns exec` bind-mounts
// /etc/netns/<Name>/<file> over /etc/<file>. Sockets the test process opens
// with Do, Listen or Dial do not see it. The directory is removed when t
// ends.
func (n *NS) WriteEtc(t testing.TB, file, content string) {
	t.Helper()
	if file == "" || strings.ContainsAny(file, "/\x00") || file == "." || file == ".." {
		t.Fatalf("WriteEtc: bad file name %q", file)
	}
	dir := filepath.Join("/etc/netns", n.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("WriteEtc: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatalf("WriteEtc: %v", err)
	}
}

// Do runs fn on an OS thread switched into the namespace. Sockets created by
// fn stay in the namespace after Do returns; goroutines that fn starts do not
// inherit the namespace. If the thread cannot be switched back it is left
// locked, so the runtime discards it.
func (n *NS) Do(fn func() error) error {
	target, err := os.Open(filepath.Join("/var/run/netns", n.Name))
	if err != nil {
		return fmt.Errorf("open netns %s: %w", n.Name, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it dies with this goroutine.
		return fmt.Errorf("leave netns %s: %w", n.Name, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// Listen opens a listener inside the namespace.
func (n *NS) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// Dial connects from inside the namespace. addr must hold an IP literal
// (name resolution would run on other threads).
func (n *NS) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Link joins a and b with a veth pair, assigns the given addresses (CIDR
// notation, IPv4 or IPv6; IPv6 without duplicate address detection), brings
// both ends up and returns the interface names inside a and b.
func Link(t testing.TB, a, b *NS, aAddrs, bAddrs []string) (aIf, bIf string) {
	t.Helper()
	suffix := randHex(4) // names must fit IFNAMSIZ (15 bytes)
	aIf, bIf = "egv"+suffix+"a", "egv"+suffix+"b"
	out, err := exec.Command("ip", "link", "add", aIf, "netns", a.Name, "type", "veth",
		"peer", "name", bIf, "netns", b.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("ip link add veth %s/%s: %v: %s", aIf, bIf, err, out)
	}
	for _, side := range []struct {
		ns    *NS
		ifc   string
		addrs []string
	}{{a, aIf, aAddrs}, {b, bIf, bAddrs}} {
		for _, addr := range side.addrs {
			args := []string{"ip", "addr", "add", addr, "dev", side.ifc}
			if strings.Contains(addr, ":") {
				args = append(args, "nodad")
			}
			side.ns.Run(t, args...)
		}
		side.ns.Run(t, "ip", "link", "set", side.ifc, "up")
	}
	return aIf, bIf
}

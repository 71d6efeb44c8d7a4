//go:build linux

package cli

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
)

// TestIptablesCommandInNamespace runs the built binary the way an init
// container does, inside a pod-like namespace: the SPEC's apply command
// (which validates), apply again, validate, remove, and validate again,
// which must fail with exit code 3.
func TestIptablesCommandInNamespace(t *testing.T) {
	netns.Require(t, "go", "setpriv", "iptables-nft-save", "iptables-nft-restore", "iptables-legacy-save", "iptables-legacy-restore")
	bin := testutil.BuildEgret(t)
	pod, outside := netns.New(t, "cli-pod"), netns.New(t, "cli-out")
	netns.Link(t, pod, outside, []string{"10.253.0.1/24"}, []string{"10.253.0.2/24"})

	// A free port in the pod for the redirect.
	ln, err := pod.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(args ...string) (int, string, string) {
		cmd := pod.Command(ctx, append([]string{bin, "iptables"}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, stdout.String(), stderr.String()
		case errors.As(err, &ee):
			return ee.ExitCode(), stdout.String(), stderr.String()
		}
		t.Fatal(err)
		return -1, "", ""
	}
	probe := []string{"--probe-addr", "10.253.0.2:80", "--probe-timeout", "2s"}
	common := []string{"--proxy-uid", "1337", "--redirect-port", port, "--exclude-cidrs", "10.96.0.0/12,10.244.0.0/16"}

	// Validation would prove nothing as the proxy's own user: refused
	// before any rule is written.
	if code, _, errOut := run("apply", "--proxy-uid", "0", "--redirect-port", port); code != 1 || !strings.Contains(errOut, "running as the proxy uid 0") {
		t.Fatalf("apply as the proxy uid: exit %d: %s", code, errOut)
	}
	if save := pod.Run(t, "iptables-nft-save", "-t", "nat"); strings.Contains(save, "EGRET") {
		t.Fatalf("rules written although validation could not run:\n%s", save)
	}

	for i := range 2 {
		code, out, errOut := run(append(append([]string{"apply"}, common...), probe...)...)
		if code != 0 || !strings.Contains(out, "--to-ports "+port) || !strings.Contains(errOut, "validation passed") {
			t.Fatalf("apply #%d: exit %d\nstdout:\n%s\nstderr:\n%s", i+1, code, out, errOut)
		}
	}
	if save := pod.Run(t, "iptables-nft-save", "-t", "nat"); strings.Count(save, "-j EGRET_OUTPUT") != 1 {
		t.Fatalf("after two applies:\n%s", save)
	}
	if code, _, errOut := run(append([]string{"validate", "--redirect-port", port}, probe...)...); code != 0 {
		t.Fatalf("validate with rules: exit %d: %s", code, errOut)
	}
	if code, _, errOut := run(append([]string{"remove"}, common...)...); code != 0 {
		t.Fatalf("remove: exit %d: %s", code, errOut)
	}
	if save := pod.Run(t, "iptables-nft-save", "-t", "nat"); strings.Contains(save, "EGRET") {
		t.Fatalf("after remove:\n%s", save)
	}
	code, _, errOut := run(append([]string{"validate", "--redirect-port", port}, probe...)...)
	if code != iptablesExitValidation || !strings.Contains(errOut, "validation failed") {
		t.Fatalf("validate without rules: exit %d (want %d): %s", code, iptablesExitValidation, errOut)
	}
	code, out, _ := run(append([]string{"validate", "-o", "json", "--redirect-port", port}, probe...)...)
	if code != iptablesExitValidation || !strings.Contains(out, `"ok": false`) {
		t.Fatalf("validate -o json without rules: exit %d: %s", code, out)
	}

	// The documented capabilities: NET_ADMIN is enough with nft (auto
	// detection skips legacy, which cannot even read its tables without
	// NET_RAW); legacy fails clearly without NET_RAW.
	t.Run("net-admin-only", func(t *testing.T) {
		capped := func(caps string, args ...string) (int, string) {
			cmd := pod.Command(ctx, append([]string{"setpriv", "--bounding-set=-all," + caps, "--", bin, "iptables"}, args...)...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			return cmd.ProcessState.ExitCode(), string(out)
		}
		if code, out := capped("+net_admin", append(append([]string{"apply"}, common...), probe...)...); code != 0 || !strings.Contains(out, "validation passed") {
			t.Fatalf("apply with NET_ADMIN only: exit %d: %s", code, out)
		}
		if code, out := capped("+net_admin", append([]string{"remove"}, common...)...); code != 0 {
			t.Fatalf("remove with NET_ADMIN only: exit %d: %s", code, out)
		}
		if code, out := capped("+net_admin", append([]string{"apply", "--backend", "legacy", "--skip-validation"}, common...)...); code != 1 || !strings.Contains(out, "needs NET_ADMIN") {
			t.Fatalf("legacy without NET_RAW: exit %d: %s", code, out)
		}
		if code, out := capped("+net_admin,+net_raw", append([]string{"apply", "--backend", "legacy"}, append(common, probe...)...)...); code != 0 {
			t.Fatalf("legacy with NET_ADMIN and NET_RAW: exit %d: %s", code, out)
		}
		if code, out := capped("+net_admin,+net_raw", append([]string{"remove", "--backend", "legacy"}, common...)...); code != 0 {
			t.Fatalf("legacy remove: exit %d: %s", code, out)
		}
	})
}

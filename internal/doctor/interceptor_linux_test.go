//go:build linux

package doctor

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
)

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:3A99":                         "127.0.0.1:15001",
		"00000000:0CB8":                         "0.0.0.0:3256",
		"00000000000000000000000001000000:3A9E": "[::1]:15006",
		"0000000000000000FFFF00000100007F:1F90": "127.0.0.1:8080",
	} {
		got, ok := parseProcAddr(in)
		if !ok || got != netip.MustParseAddrPort(want) {
			t.Errorf("parseProcAddr(%q) = %v %v, want %s", in, got, ok, want)
		}
	}
}

// TestInterceptorCheckFindsMesh: real processes running as Istio's UID
// listen on envoy's capture and health ports in a pod namespace; the built
// `egret doctor`, run in that namespace, reports the second interceptor
// from /proc/net/tcp: a warning without proxy variables (two transparent
// proxies), a pass naming the shape with them (egret's environment mode
// beside the mesh), and nothing in a pod without the mesh.
func TestInterceptorCheckFindsMesh(t *testing.T) {
	netns.Require(t, "setpriv")
	bin := testutil.BuildEgret(t)
	pod := netns.New(t, "mesh-pod")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(t *testing.T, env []string) Outcome {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer rcancel()
		cmd := pod.Command(rctx, bin, "doctor", "--client", "go", "--timeout", "1s", "-o", "json")
		cmd.Env = env
		out, _ := cmd.Output()
		var rep Report
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("not a report: %v\n%s", err, out)
		}
		return mustFind(t, rep.Checks, "interceptors")
	}
	t.Run("no-mesh", func(t *testing.T) {
		if o := run(t, nil); o.Status != Pass || !strings.Contains(o.Summary, "no mesh proxy") {
			t.Errorf("%s: %s %v", o.Status, o.Summary, o.Details)
		}
	})
	for _, port := range []string{"15001", "15006", "15021"} {
		cmd := pod.CommandAs(ctx, 1337, 1337, bin, "echo", "--listen", "127.0.0.1:"+port)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ls []listener
		pod.Do(func() error {
			var err error
			ls, err = readListeners("/proc/thread-self")
			return err
		})
		if len(ls) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the envoy stand-ins did not listen: %v", ls)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Run("mesh-without-proxy-variables-warns", func(t *testing.T) {
		o := run(t, nil)
		if o.Status != Warn {
			t.Fatalf("%s: %s %v", o.Status, o.Summary, o.Details)
		}
		contains(t, "summary", o.Summary, "a second interceptor: Istio (envoy) captures this pod's outbound TCP")
		contains(t, "details", strings.Join(o.Details, "\n"), "127.0.0.1:15001 (outbound capture, uid 1337)", "127.0.0.1:15006 (inbound capture, uid 1337)")
		contains(t, "advice", o.Advice, "exempts its own UID 1337", "docs/mesh.md")
	})
	t.Run("mesh-with-proxy-variables-is-env-mode", func(t *testing.T) {
		o := run(t, []string{"HTTPS_PROXY=http://egret-gateway.egress:3128", "https_proxy=http://egret-gateway.egress:3128"})
		if o.Status != Pass {
			t.Fatalf("%s: %s %v", o.Status, o.Summary, o.Details)
		}
		contains(t, "summary", o.Summary, "Istio (envoy) intercepts this pod's traffic", "environment mode")
	})
}

//go:build linux

package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

var (
	buildOnce sync.Once
	egretBin  string
	buildErr  error
)

// TestDoctorCommandInPod runs the built `egret doctor` inside the lab's pod
// namespace, as `kubectl exec` would, with the pod's environment: a clean
// setup exits 0 with every check passing in the JSON report, a wrong proxy
// password exits 1 naming the proxy check, a bad flag exits 2.
func TestDoctorCommandInPod(t *testing.T) {
	l := newLab(t)
	bin := testutil.BuildEgret(t)
	pid1 := filepath.Join(t.TempDir(), "environ")
	run := func(t *testing.T, env []string, extra ...string) (int, string, string) {
		t.Helper()
		if err := os.WriteFile(pid1, []byte(strings.Join(env, "\x00")+"\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := append([]string{bin, "doctor", "--echo", l.echoURL, "--internal", "kubernetes.default.svc:" + l.apiPort,
			"--resolv-conf", l.resolvConf, "--pid1-environ", pid1, "--nameserver", l.dnsAddr, "--client", "go,curl", "--timeout", "3s"}, extra...)
		cmd := l.pod.Command(ctx, args...)
		cmd.Env = append(env, "PATH="+os.Getenv("PATH"))
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
	decode := func(t *testing.T, out string) map[string]Outcome {
		t.Helper()
		var rep Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("-o json output is not a report (record and checks): %v\n%s", err, out)
		}
		if rep.Record.EgretVersion == "" || rep.Record.Paths[PathOutsideViaProxy] == "" {
			t.Errorf("the record lacks the version or the paths: %+v", rep.Record)
		}
		m := map[string]Outcome{}
		for _, o := range rep.Checks {
			m[o.Name+" "+o.Target] = o
		}
		return m
	}

	t.Run("clean-exits-0", func(t *testing.T) {
		// PATH is also set for the shell but not in the fake PID 1 file:
		// not a proxy variable, so not a difference.
		code, out, errOut := run(t, proxyEnv("http://"+l.gateway, fullNoProxy), "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s\n%s", code, out, errOut)
		}
		for k, o := range decode(t, out) {
			if o.Status != Pass {
				t.Errorf("%s: %s: %s", k, o.Status, o.Summary)
			}
		}
	})
	t.Run("wrong-password-exits-1", func(t *testing.T) {
		code, out, errOut := run(t, proxyEnv("http://"+squidUser+":"+wrongPass+"@"+l.squid, fullNoProxy))
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
		}
		for _, want := range []string{"fail    proxy", `rejected the credentials of user "alice"`, "do: Fix the password in HTTP_PROXY", "failed\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("text report lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out+errOut, wrongPass) {
			t.Error("the proxy password appears in the output")
		}
	})
	t.Run("bad-flag-exits-2", func(t *testing.T) {
		code, _, errOut := run(t, nil, "--echo", "ftp://x/")
		if code != 2 || !strings.Contains(errOut, "--echo") {
			t.Errorf("exit %d, stderr %q; want 2 naming --echo", code, errOut)
		}
	})
}

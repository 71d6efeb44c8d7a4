//go:build linux

package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

// TestDoctorAdoptsAppProcess is `kubectl debug --target app` in the lab: a
// "distroless" application runs chrooted in its own root file system
// (only its executable, a runtime on its PATH and resolv.conf) inside the
// pod's network namespace, with the proxy variables in its environment;
// the built `egret doctor --app-pid PID` runs beside it with an empty
// environment, as an ephemeral container does, and must check with the
// application's environment, its runtimes and its resolv.conf.
func TestDoctorAdoptsAppProcess(t *testing.T) {
	l := newLab(t)
	chroot := testutil.NeedTool(t, "chroot")
	bin := testutil.BuildEgret(t)
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"nodejs/bin", "usr/local/bin", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The application: a static binary named like the runtime it stands
	// for (egret's own echo server, which keeps running).
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "nodejs/bin/node"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/local/bin/python3"), []byte("not run\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/resolv.conf"), []byte(resolvText), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	appEnv := append(proxyEnv("http://"+l.policyGateway, fullNoProxy), "PATH=/usr/local/bin:/usr/bin", "HOSTNAME=orders-7d9c")
	app := l.pod.Command(ctx, chroot, root, "/nodejs/bin/node", "echo", "--listen", "127.0.0.1:0")
	app.Env = appEnv
	appErr := &testutil.SyncBuffer{}
	app.Stderr = appErr
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); app.Wait() })
	pid := app.Process.Pid
	// `ip netns exec` and chroot exec in place: wait for the application.
	deadline := time.Now().Add(10 * time.Second)
	for {
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if strings.HasSuffix(exe, "/nodejs/bin/node") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is %q, not the application; stderr: %s", pid, exe, appErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	api := "kubernetes.default.svc:" + l.apiPort
	run := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
		defer rcancel()
		cmd := l.pod.Command(rctx, append([]string{bin, "doctor", "--internal", api, "--nameserver", l.dnsAddr, "--timeout", "3s"}, args...)...)
		cmd.Env = []string{} // an ephemeral container's: nothing of the app's
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

	t.Run("checks-as-the-app", func(t *testing.T) {
		code, out, errOut := run(t, "--app-pid", strconv.Itoa(pid), "--echo", l.echoURL, "-o", "json")
		var rep Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("exit %d: -o json is not a report: %v\n%s\n%s", code, err, out, errOut)
		}
		if code != 0 {
			t.Errorf("exit %d, want 0\n%s", code, out)
		}
		for _, o := range rep.Checks {
			if o.Status != Pass {
				t.Errorf("%s %s: %s: %s", o.Name, o.Target, o.Status, o.Summary)
			}
		}
		p := mustFind(t, rep.Checks, "proxy")
		contains(t, "proxy check", p.Target, "http://"+l.policyGateway)
		pid1 := mustFind(t, rep.Checks, "pid1-env")
		contains(t, "pid1-env", pid1.Summary, "the checks use PID "+strconv.Itoa(pid)+"'s own environment")
		if rep.Record.App.PID != pid || !strings.HasSuffix(rep.Record.App.Executable, "/nodejs/bin/node") {
			t.Errorf("record app %+v", rep.Record.App)
		}
		contains(t, "record runtimes", rep.Record.App.Runtimes, "the application's executable", "python3 (/usr/local/bin/python3)")
		contains(t, "record command", rep.Record.App.Command, "/nodejs/bin/node echo --listen 127.0.0.1:0")
		if rep.Record.Pod.Name != "orders-7d9c" {
			t.Errorf("record pod name %q, want the app's HOSTNAME", rep.Record.Pod.Name)
		}
		rt := mustFind(t, rep.Checks, "runtimes "+api)
		contains(t, "runtimes", rt.Summary, "node-http", "python-requests")
	})
	t.Run("no-such-process-exits-2", func(t *testing.T) {
		code, _, errOut := run(t, "--app-pid", "999999")
		if code != 2 || !strings.Contains(errOut, "--app-pid: no process 999999 here") || !strings.Contains(errOut, "--target") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}

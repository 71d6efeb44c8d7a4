package kubenode

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startNamed starts a real process named name (a copy of sleep) with exactly
// env as its environment, and stops it when the test ends.
func startNamed(t *testing.T, name string, env []string) int {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		if os.Getenv("EGRET_REQUIRE_ALL") == "1" {
			t.Fatalf("sleep not found: %v", err)
		}
		t.Skipf("sleep not found: %v", err)
	}
	bin := filepath.Join(t.TempDir(), name)
	src, err := os.Open(sleep)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	cmd := exec.Command(bin, "300")
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Wait until the kernel shows the new program (after exec).
	for i := 0; i < 200; i++ {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); err == nil && strings.HasPrefix(string(b), bin) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cmd.Process.Pid
}

// uniqueName returns a process name no other test run uses (at most 15
// characters, so /proc/PID/comm holds it whole).
func uniqueName() string {
	return fmt.Sprintf("egt%d%04d", os.Getpid()%100000, rand.IntN(10000))
}

var proxyEnv = []string{
	"PATH=/usr/bin:/bin",
	"HTTPS_PROXY=http://pull:s3cret@proxy.corp.example:3128",
	"https_proxy=http://pull:s3cret@proxy.corp.example:3128",
	"NO_PROXY=localhost,127.0.0.1,.corp.example,10.0.0.0/8",
	"no_proxy=localhost,127.0.0.1,.corp.example,10.0.0.0/8",
}

func TestInspectRealProcess(t *testing.T) {
	name := uniqueName()
	pid := startNamed(t, name, proxyEnv)
	for _, tc := range []struct {
		name     string
		opts     InspectOptions
		ok       bool
		decision map[string]string // registry -> decision
		reason   map[string]string // registry -> reason substring
	}{
		{name: "by-pid", opts: InspectOptions{PID: pid, Registries: []string{"registry.internal:5000", "harbor.corp.example", "10.1.2.3:5000", "localhost:5000"}},
			decision: map[string]string{"registry.internal:5000": "proxy", "harbor.corp.example": "direct", "10.1.2.3:5000": "direct", "localhost:5000": "direct"},
			reason: map[string]string{"registry.internal:5000": "would go through http://pull:xxxxx@proxy.corp.example:3128: proxy from HTTPS_PROXY",
				"harbor.corp.example": "matched entry `.corp.example`", "10.1.2.3:5000": "matched entry `10.0.0.0/8`", "localhost:5000": "always sends localhost direct"}},
		{name: "by-name", opts: InspectOptions{Process: name, Registries: []string{"harbor.corp.example"}}, ok: true,
			decision: map[string]string{"harbor.corp.example": "direct"}},
		{name: "ip-registry-outside-cidr", opts: InspectOptions{PID: pid, Registries: []string{"192.168.5.5:5000"}},
			decision: map[string]string{"192.168.5.5:5000": "proxy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.UnitDirs = []string{t.TempDir()}
			rep, err := Inspect(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if rep.PID != pid {
				t.Errorf("inspected pid %d, want %d", rep.PID, pid)
			}
			if rep.OK() != tc.ok {
				t.Errorf("OK = %v, problems %v", rep.OK(), rep.Problems)
			}
			if rep.Env["NO_PROXY"] != "localhost,127.0.0.1,.corp.example,10.0.0.0/8" || rep.Env["HTTPS_PROXY"] != "http://pull:xxxxx@proxy.corp.example:3128" {
				t.Errorf("env = %v", rep.Env)
			}
			if _, ok := rep.Env["PATH"]; ok {
				t.Error("non-proxy variables reported")
			}
			for _, d := range rep.Decisions {
				if want := tc.decision[d.Registry]; d.Decision != want {
					t.Errorf("%s: %s (%s), want %s", d.Registry, d.Decision, d.Reason, want)
				}
				if want := tc.reason[d.Registry]; !strings.Contains(d.Reason, want) {
					t.Errorf("%s: reason %q lacks %q", d.Registry, d.Reason, want)
				}
				if !d.OK && !strings.Contains(d.Advice, "add ") {
					t.Errorf("%s: advice %q", d.Registry, d.Advice)
				}
			}
			for _, p := range rep.Problems {
				if strings.Contains(p, "s3cret") {
					t.Errorf("problem leaks the password: %s", p)
				}
			}
			if time.Since(rep.Started) > time.Minute || time.Until(rep.Started) > 2*time.Second {
				t.Errorf("start time %v is not now", rep.Started)
			}
		})
	}
}

// TestInspectByRuntimeName finds a process really named containerd.
func TestInspectByRuntimeName(t *testing.T) {
	pid := startNamed(t, Containerd.Process(), proxyEnv)
	rep, err := Inspect(InspectOptions{Runtime: Containerd, Process: Containerd.Process(), Registries: []string{"registry.internal"}, UnitDirs: []string{t.TempDir()}})
	if err != nil {
		// A real containerd on this machine makes the name ambiguous: the
		// error must then list our process.
		if strings.Contains(err.Error(), "several processes") && strings.Contains(err.Error(), fmt.Sprint(pid)) {
			t.Skipf("another containerd runs here: %v", err)
		}
		t.Fatal(err)
	}
	if rep.PID != pid || rep.Unit != "containerd.service" {
		t.Fatalf("found pid %d unit %s, want %d containerd.service", rep.PID, rep.Unit, pid)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "add registry.internal to NO_PROXY and no_proxy in the drop-in, then run systemctl daemon-reload && systemctl restart containerd") {
		t.Errorf("problems = %v", rep.Problems)
	}
}

func TestInspectDrift(t *testing.T) {
	name := uniqueName()
	pid := startNamed(t, name, proxyEnv)
	unit := name + ".service"
	rendered := func(t *testing.T, noProxy ...string) string {
		r, err := Render(RenderOptions{Runtime: Containerd, Proxy: "http://pull:s3cret@proxy.corp.example:3128", NoProxy: noProxy})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		envPath := filepath.Join(dir, unit+".d", EnvFileName)
		mustWrite(t, filepath.Join(dir, unit+".d", DropInName), strings.ReplaceAll(r.DropIn.Content, r.EnvFile.Path, envPath))
		mustWrite(t, envPath, r.EnvFile.Content)
		return dir
	}
	for _, tc := range []struct {
		name     string
		dir      func(t *testing.T) string
		drift    []string
		problems int
	}{
		{name: "live-matches-unit", dir: func(t *testing.T) string {
			// The live process has no HTTP_PROXY: configure the same.
			dir := t.TempDir()
			mustWrite(t, filepath.Join(dir, unit), "[Unit]\nDescription=test\n[Service]\nExecStart=/bin/true\nEnvironment=\"HTTPS_PROXY=http://pull:s3cret@proxy.corp.example:3128\" https_proxy=http://pull:s3cret@proxy.corp.example:3128\n")
			mustWrite(t, filepath.Join(dir, unit+".d", "10-np.conf"), "[Service]\nEnvironment=NO_PROXY=localhost,127.0.0.1,.corp.example,10.0.0.0/8 \\\n  no_proxy=localhost,127.0.0.1,.corp.example,10.0.0.0/8\n")
			return dir
		}},
		{name: "drop-in-edited-not-restarted", dir: func(t *testing.T) string { return rendered(t, ".corp.example", "10.0.0.0/8", "registry.internal") },
			drift: []string{"HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"}, problems: 1},
		{name: "missing-environment-file", dir: func(t *testing.T) string {
			dir := t.TempDir()
			mustWrite(t, filepath.Join(dir, unit+".d", "http-proxy.conf"), "[Service]\nEnvironmentFile=/nonexistent/egret-proxy.env\nEnvironmentFile=-/nonexistent/optional.env\n")
			return dir
		}, drift: []string{"HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"}, problems: 2},
		{name: "higher-dir-masks-lower", dir: func(t *testing.T) string {
			high, low := t.TempDir(), t.TempDir()
			mustWrite(t, filepath.Join(low, unit+".d", "http-proxy.conf"), "[Service]\nEnvironment=NO_PROXY=wrong\n")
			mustWrite(t, filepath.Join(high, unit+".d", "http-proxy.conf"), "[Service]\nEnvironment=HTTPS_PROXY=http://pull:s3cret@proxy.corp.example:3128 https_proxy=http://pull:s3cret@proxy.corp.example:3128\nEnvironment=NO_PROXY=localhost,127.0.0.1,.corp.example,10.0.0.0/8 no_proxy=localhost,127.0.0.1,.corp.example,10.0.0.0/8\n")
			return high + string(os.PathListSeparator) + low
		}},
		{name: "empty-assignment-resets", dir: func(t *testing.T) string {
			dir := t.TempDir()
			mustWrite(t, filepath.Join(dir, unit+".d", "10-a.conf"), "[Service]\nEnvironment=HTTP_PROXY=http://old:1\n")
			mustWrite(t, filepath.Join(dir, unit+".d", "20-b.conf"), "[Service]\nEnvironment=\nEnvironment=HTTPS_PROXY=http://pull:s3cret@proxy.corp.example:3128 https_proxy=http://pull:s3cret@proxy.corp.example:3128\n"+
				"Environment=NO_PROXY=localhost,127.0.0.1,.corp.example,10.0.0.0/8 no_proxy=localhost,127.0.0.1,.corp.example,10.0.0.0/8\n")
			return dir
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dirs := filepath.SplitList(tc.dir(t))
			if tc.drift != nil {
				// An edit made after the process started.
				later := time.Now().Add(5 * time.Second)
				for _, d := range dirs {
					_ = filepath.Walk(d, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, later, later) })
				}
			}
			rep, err := Inspect(InspectOptions{PID: pid, Unit: unit, UnitDirs: dirs})
			if err != nil {
				t.Fatal(err)
			}
			var drift []string
			for _, d := range rep.Drift {
				drift = append(drift, d.Name)
				if strings.Contains(d.Live+d.Configured, "s3cret") {
					t.Errorf("drift leaks the password: %+v", d)
				}
			}
			if strings.Join(drift, ",") != strings.Join(tc.drift, ",") {
				t.Errorf("drift = %v, want %v", drift, tc.drift)
			}
			if len(rep.Problems) != tc.problems {
				t.Errorf("problems = %v, want %d", rep.Problems, tc.problems)
			}
			if len(rep.UnitFiles) == 0 {
				t.Error("no unit file read")
			}
			if tc.drift != nil && rep.ChangedAfterStart == "" {
				t.Error("the drop-in written after the start is not reported")
			}
		})
	}
}

func TestInspectErrors(t *testing.T) {
	if _, err := Inspect(InspectOptions{Process: uniqueName()}); !errors.Is(err, ErrNoProcess) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := Inspect(InspectOptions{PID: 1 << 30}); err == nil || !strings.Contains(err.Error(), "environment of pid") {
		t.Errorf("unknown pid: %v", err)
	}
	if _, err := Inspect(InspectOptions{}); err == nil {
		t.Error("no pid and no name accepted")
	}
	name := uniqueName()
	a := startNamed(t, name, proxyEnv)
	b := startNamed(t, name, proxyEnv)
	_, err := Inspect(InspectOptions{Process: name})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(a)) || !strings.Contains(err.Error(), fmt.Sprint(b)) {
		t.Errorf("two processes with one name: %v", err)
	}
}

func TestInspectExpectProxy(t *testing.T) {
	pid := startNamed(t, uniqueName(), []string{"PATH=/bin"})
	rep, err := Inspect(InspectOptions{PID: pid, ExpectProxy: true, Registries: []string{"registry.internal"}, UnitDirs: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || !strings.Contains(rep.Problems[0], "no HTTP_PROXY or HTTPS_PROXY") {
		t.Errorf("problems = %v", rep.Problems)
	}
	if d := rep.Decisions[0]; d.Decision != "direct" || !d.OK {
		t.Errorf("decision without a proxy = %+v", d)
	}
}

// TestInspectKubeletAPIServer: the kubelet's route to the server of its
// --kubeconfig must be direct; a fake /proc holds the kubelet's command
// line, environment and file system (/proc/PID/root, /proc/PID/cwd).
func TestInspectKubeletAPIServer(t *testing.T) {
	const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {server: "https://other.example:6443"}
- name: c
  cluster: {server: "https://%s"}
contexts:
- name: k
  context: {cluster: c, user: u}
current-context: k
users:
- name: u
  user: {}
`
	for _, tc := range []struct {
		name, server, noProxy string
		args                  []string // after "kubelet"
		file                  string   // the kubeconfig's path under root/ ("" none)
		decision              string   // "" no API server decision
		problem               string   // substring of the one problem, "" none
	}{
		{name: "direct-cidr", server: "10.0.0.5:6443", noProxy: "localhost,10.0.0.0/8", args: []string{"--kubeconfig=/etc/kubernetes/kubelet.conf"}, file: "etc/kubernetes/kubelet.conf", decision: "direct"},
		{name: "direct-suffix", server: "api.corp.example:6443", noProxy: ".corp.example", args: []string{"--kubeconfig", "/etc/kubernetes/kubelet.conf"}, file: "etc/kubernetes/kubelet.conf", decision: "direct"},
		{name: "proxied", server: "10.0.0.5:6443", noProxy: "localhost,10.96.0.1,.svc", args: []string{"-kubeconfig=/etc/kubernetes/kubelet.conf"}, file: "etc/kubernetes/kubelet.conf", decision: "proxy",
			problem: "add 10.0.0.5 to NO_PROXY and no_proxy in the kubelet's drop-in"},
		{name: "relative", server: "10.0.0.5:6443", noProxy: "10.0.0.5", args: []string{"--kubeconfig=kubelet.conf"}, file: "CWD/kubelet.conf", decision: "direct"},
		{name: "missing-file", noProxy: "10.0.0.5", args: []string{"--kubeconfig=/etc/kubernetes/kubelet.conf"}, problem: "the route to the API server is unchecked"},
		{name: "standalone", noProxy: "", args: []string{"--config=/etc/kubelet.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procRoot := t.TempDir()
			pd := filepath.Join(procRoot, "4242")
			for _, d := range []string{pd, filepath.Join(pd, "root", "etc", "kubernetes"), filepath.Join(pd, "cwd")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write := func(name, content string) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(pd, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("comm", "kubelet\n")
			write("cmdline", strings.Join(append([]string{"/usr/bin/kubelet"}, tc.args...), "\x00")+"\x00")
			write("environ", "HTTPS_PROXY=http://proxy.corp.example:3128\x00NO_PROXY="+tc.noProxy+"\x00")
			if tc.file != "" {
				write(filepath.Join("root", strings.Replace(tc.file, "CWD/", "../cwd/", 1)), fmt.Sprintf(kubeconfig, tc.server))
			}
			rep, err := Inspect(InspectOptions{PID: 4242, Runtime: Kubelet, Proc: Proc{Root: procRoot}, UnitDirs: []string{t.TempDir()}})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.decision == "" && rep.APIServer != nil:
				t.Errorf("API server decision %+v, want none", rep.APIServer)
			case tc.decision != "" && (rep.APIServer == nil || rep.APIServer.Decision != tc.decision || rep.APIServer.Registry != "https://"+tc.server):
				t.Errorf("API server decision %+v, want %s for https://%s", rep.APIServer, tc.decision, tc.server)
			}
			if tc.problem == "" && !rep.OK() || tc.problem != "" && (len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], tc.problem)) {
				t.Errorf("problems %q, want one with %q", rep.Problems, tc.problem)
			}
		})
	}
}

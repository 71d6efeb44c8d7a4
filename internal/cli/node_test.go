package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNodeRenderCommand(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout string
		stderr string
	}{
		{name: "stdout", args: []string{"node", "render", "--runtime", "containerd", "--proxy", "http://proxy:3128", "--registry", "registry.internal:5000"},
			stdout: `Environment="NO_PROXY=localhost,127.0.0.1,::1,registry.internal"`, stderr: "systemctl daemon-reload && systemctl restart containerd"},
		{name: "write-dir", args: []string{"node", "render", "--runtime", "crio", "--proxy", "http://proxy:3128", "--write-dir", dir},
			stdout: "wrote " + filepath.Join(dir, "crio.service.d", "http-proxy.conf")},
		{name: "credentials-from-stdin", args: []string{"node", "render", "--runtime", "docker", "--proxy-file", "-", "--write-dir", dir}, stdin: "http://u:p%40ss@proxy:3128\n",
			stdout: "wrote " + filepath.Join(dir, "docker.service.d", "http-proxy.env")},
		{name: "credentials-not-printed", args: []string{"node", "render", "--runtime", "docker", "--proxy-file", "-"}, stdin: "http://u:p%40ss@proxy:3128\n",
			stdout: "EnvironmentFile=/etc/systemd/system/docker.service.d/http-proxy.env", stderr: "written only with --write-dir DIR"},
		{name: "json", args: []string{"node", "render", "--runtime", "docker", "--proxy-file", "-", "-o", "json"}, stdin: "http://u:p%40ss@proxy:3128\n",
			stdout: `"noProxy": "localhost,127.0.0.1,::1"`},
		{name: "old-o-dir", args: []string{"node", "render", "--runtime", "crio", "--proxy", "http://proxy:3128", "-o", dir}, code: 2,
			stderr: "-o is the output format (text or json), as everywhere in egret: write the files with --write-dir " + dir},
		{name: "old-output-dir", args: []string{"node", "render", "--runtime", "crio", "--proxy", "http://proxy:3128", "--output-dir", dir},
			stdout: "Flag --output-dir has been deprecated, use --write-dir"},
		{name: "bad-entry", args: []string{"node", "render", "--runtime", "crio", "--proxy", "http://proxy:3128", "--no-proxy", "host:99999"}, code: 2, stderr: `"host:99999": port "99999" is not a number from 1 to 65535`},
		{name: "bad-registry-port", args: []string{"node", "render", "--runtime", "crio", "--proxy", "http://proxy:3128", "--registry", "reg:0"}, code: 2, stderr: `port "0"`},
		{name: "bad-proxy-port", args: []string{"node", "render", "--runtime", "crio", "--proxy", "http://proxy:99999"}, code: 2, stderr: `port "99999"`},
		{name: "no-runtime", args: []string{"node", "render", "--proxy", "http://p:1"}, code: 2, stderr: "unknown runtime"},
		{name: "both-proxy-flags", args: []string{"node", "render", "--runtime", "kubelet", "--proxy", "http://p:1", "--proxy-file", "x"}, code: 2, stderr: "exactly one"},
		{name: "bad-url", args: []string{"node", "render", "--runtime", "kubelet", "--proxy", "proxy:3128"}, code: 2, stderr: "no scheme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(tc.args, strings.NewReader(tc.stdin), &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stdout %q lacks %q or stderr %q lacks %q", out.String(), tc.stdout, errb.String(), tc.stderr)
			}
			if strings.Contains(out.String()+errb.String(), "p%40ss") {
				t.Error("the password was printed")
			}
		})
	}
	st, err := os.Stat(filepath.Join(dir, "docker.service.d", "http-proxy.env"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("env file: %v mode %v", err, st.Mode())
	}
}

func TestNodeCheckCommand(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("sleep not found")
	}
	cmd := exec.Command(sleep, "300")
	cmd.Env = []string{"HTTPS_PROXY=http://proxy.corp:3128", "NO_PROXY=localhost,.corp"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := fmt.Sprint(cmd.Process.Pid)
	for i := 0; i < 200; i++ {
		if b, _ := os.ReadFile("/proc/" + pid + "/environ"); bytes.Contains(b, []byte("NO_PROXY")) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	units := t.TempDir()
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
	}{
		{name: "registry-proxied-exits-1", args: []string{"--registry", "registry.internal"}, code: 1,
			stdout: "FAIL registry.internal: proxy (would go through http://proxy.corp:3128: proxy from HTTPS_PROXY"},
		{name: "registry-direct-exits-0", args: []string{"--registry", "harbor.corp"}, code: 0, stdout: "matched entry `.corp`"},
		{name: "json", args: []string{"--registry", "harbor.corp", "-o", "json"}, code: 0, stdout: `"decision": "direct"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"node", "check", "--pid", pid, "--unit", "test-egret.service", "--unit-dir", units}, tc.args...)
			code := Main(args, nil, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, out.String())
			}
			if strings.Contains(tc.name, "json") {
				var v map[string]any
				if err := json.Unmarshal(out.Bytes(), &v); err != nil {
					t.Errorf("not JSON: %v", err)
				}
			}
		})
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"node", "check", "--process", "no-such-egret-proc"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "no such process") {
		t.Errorf("missing process: exit %d, stderr %s", code, errb.String())
	}
	if code := Main([]string{"node", "check"}, nil, &out, &errb); code != 2 {
		t.Errorf("no selector: exit %d", code)
	}
}

// TestRuntimeNoProxyOneOwner: egret node render and egret noproxy render
// --for a runtime write the same NO_PROXY for the same input (one function,
// noproxy.RuntimeNoProxy, owns it), and both refuse what Go cannot read.
func TestRuntimeNoProxyOneOwner(t *testing.T) {
	noProxyOf := func(out string) string {
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(l, `Environment="NO_PROXY=`); ok {
				return strings.TrimSuffix(v, `"`)
			}
		}
		return ""
	}
	for _, rt := range []string{"containerd", "crio", "docker", "kubelet"} {
		var a, b, e bytes.Buffer
		if code := Main([]string{"node", "render", "--runtime", rt, "--proxy", "http://proxy:3128", "--no-proxy", ".corp.example,10.0.0.0/8", "--registry", "registry.internal:5000", "--registry", "[fd00::5]:5000"}, nil, &a, &e); code != 0 {
			t.Fatalf("node render: %d %s", code, e.String())
		}
		if code := Main([]string{"noproxy", "render", ".corp.example,10.0.0.0/8", "--for", rt, "--proxy", "http://proxy:3128", "--registry", "registry.internal:5000", "--registry", "[fd00::5]:5000"}, nil, &b, &e); code != 0 {
			t.Fatalf("noproxy render: %d %s", code, e.String())
		}
		na, nb := noProxyOf(a.String()), noProxyOf(b.String())
		if na == "" || na != nb {
			t.Errorf("%s: node render NO_PROXY=%q, noproxy render NO_PROXY=%q", rt, na, nb)
		}
		if na != "localhost,127.0.0.1,::1,.corp.example,10.0.0.0/8,registry.internal,fd00::5" {
			t.Errorf("%s: NO_PROXY=%q", rt, na)
		}
	}
	for _, args := range [][]string{
		{"noproxy", "render", "host:99999", "--for", "env"},
		{"noproxy", "render", "http://x.example/", "--for", "configmap"},
		{"noproxy", "render", ".svc", "--for", "java", "--proxy", "proxy:0"},
		{"noproxy", "render", ".svc", "--for", "containerd", "--registry", "reg:70000"},
		{"noproxy", "render", "10.0.0.0/33", "--for", "kubelet"},
		{"node", "render", "--runtime", "kubelet", "--proxy", "http://p:3128", "--no-proxy", "a.example:0"},
	} {
		var out, errw bytes.Buffer
		if code := Main(args, nil, &out, &errw); code != 2 || out.Len() != 0 || !strings.Contains(errw.String(), "egret: ") {
			t.Errorf("egret %s: exit %d, stdout %q, stderr %q; want 2, nothing written, one error", strings.Join(args, " "), code, out.String(), errw.String())
		}
	}
}

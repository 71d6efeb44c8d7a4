package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"egret.io/egret/internal/testutil/tlslab"
)

func TestNodeCACommands(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "corp.pem")
	if err := os.WriteFile(ca, tlslab.NewCA(t, "Corp Root").PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(args, strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, errs := run("node", "render", "--runtime", "containerd", "--ca-file", ca, "--registry", "registry.corp:5000"); code != 0 ||
		!strings.Contains(out, `ca = "/etc/containerd/certs.d/registry.corp:5000/ca.crt"`) || !strings.Contains(errs, "config_path") {
		t.Fatalf("render to stdout: %d\n%s\n%s", code, out, errs)
	}
	// Before: no config_path, no files.
	if code, out, _ := run("node", "check", "--runtime", "containerd", "--ca-file", ca, "--ca-root", root, "--registry", "registry.corp:5000"); code != 1 || !strings.Contains(out, "FAIL registry.corp:5000") {
		t.Fatalf("check before render: %d\n%s", code, out)
	}
	if code, out, errs := run("node", "render", "--runtime", "containerd", "--ca-file", ca, "--registry", "registry.corp:5000", "--write-dir", root); code != 0 || !strings.Contains(out, "wrote ") {
		t.Fatalf("render -o: %d\n%s\n%s", code, out, errs)
	}
	cfg := filepath.Join(root, "etc/containerd/config.toml")
	if err := os.WriteFile(cfg, []byte("[plugins.\"io.containerd.cri.v1.images\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run("node", "check", "--runtime", "containerd", "--ca-file", ca, "--ca-root", root, "--registry", "registry.corp:5000"); code != 0 || !strings.Contains(out, "ok   registry.corp:5000: containerd trusts Corp Root") {
		t.Fatalf("check after render: %d\n%s", code, out)
	}
	if code, _, errs := run("node", "render", "--runtime", "docker", "--ca-file", ca, "--registry", "_default"); code != 2 || !strings.Contains(errs, "no default registry directory") {
		t.Fatalf("docker _default: %d %s", code, errs)
	}
}

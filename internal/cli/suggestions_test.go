package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"egret.io/egret/internal/lint"
	"egret.io/egret/internal/testutil"
)

// printedCommand is a command the tools print in backticks.
var printedCommand = regexp.MustCompile("`(egret [^`]+)`")

// words splits a printed command line as a shell does (blanks, single
// quotes).
func words(line string) []string {
	var out []string
	var cur strings.Builder
	in, quoted := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// parses checks that a printed egret command names a command, its flags
// and its arguments as egret reads them (without running it).
func parses(t *testing.T, line string) {
	t.Helper()
	args := words(line)[1:]
	c, rest, err := NewRoot().Find(args)
	if err != nil {
		t.Errorf("printed %q: %v", line, err)
		return
	}
	if err := c.ParseFlags(rest); err != nil {
		t.Errorf("printed %q: %v", line, err)
		return
	}
	if err := c.ValidateArgs(c.Flags().Args()); err != nil {
		t.Errorf("printed %q: %v", line, err)
	}
	if c.Runnable() == false {
		t.Errorf("printed %q names a command group, not a command", line)
	}
}

// TestPrintedCommandsRun collects the commands egret prints as advice (the
// doctor, lint's rule texts, node render) and checks that each parses;
// those that run offline are run and must do what the advice says.
func TestPrintedCommandsRun(t *testing.T) {
	seen := 0
	// egret lint: every rule's text.
	for _, r := range lint.Rules() {
		for _, m := range printedCommand.FindAllStringSubmatch(r.Help, -1) {
			parses(t, m[1])
			seen++
		}
	}

	// egret doctor, with the real binary in an environment of its own.
	bin := testutil.BuildEgret(t)
	dir := t.TempDir()
	rc := filepath.Join(dir, "resolv.conf")
	os.WriteFile(rc, []byte("nameserver 127.0.0.1\nsearch default.svc.cluster.local svc.cluster.local cluster.local\n"), 0o644)
	proxyEnv := []string{"HTTP_PROXY=http://127.0.0.1:1", "http_proxy=http://127.0.0.1:1", "HTTPS_PROXY=http://user:s3cret@127.0.0.1:1", "https_proxy=http://user:s3cret@127.0.0.1:1"}
	doctor := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"doctor", "--timeout", "300ms", "--resolv-conf", rc, "--nameserver", "127.0.0.1:1", "--pid1-environ", os.DevNull}, args...)...)
		cmd.Env = append([]string{"PATH=/nonexistent"}, env...)
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	// Java goes direct to an outside echo: the advice is a render command.
	out := doctor(append(proxyEnv, "NO_PROXY=.svc", "no_proxy=.svc"), "--echo", "http://192.0.2.10:8080/", "--client", "java,go")
	if strings.Contains(out, "s3cret") {
		t.Error("the doctor printed the proxy password")
	}
	var render string
	for _, m := range printedCommand.FindAllStringSubmatch(out, -1) {
		parses(t, m[1])
		seen++
		if strings.HasPrefix(m[1], "egret noproxy render ") {
			render = m[1]
		}
	}
	if render == "" {
		t.Fatalf("the doctor's java advice names no render command:\n%s", out)
	}
	var rout, rerr bytes.Buffer
	if code := Main(words(render)[1:], nil, &rout, &rerr); code != 0 ||
		!strings.Contains(rout.String(), "JAVA_TOOL_OPTIONS=-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=1 -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=1") ||
		!strings.Contains(rout.String(), "-Dhttp.nonProxyHosts=*.svc|svc") {
		t.Errorf("%s: exit %d, %q %q", render, code, rout.String(), rerr.String())
	}
	// ... and applying it makes java use the proxy.
	opts := strings.TrimPrefix(strings.TrimSpace(rout.String()), "JAVA_TOOL_OPTIONS=")
	after := doctor(append(proxyEnv, "NO_PROXY=.svc", "no_proxy=.svc", "JAVA_TOOL_OPTIONS="+strings.Trim(opts, "'")), "--echo", "http://192.0.2.10:8080/", "--client", "java,go")
	if strings.Contains(after, "java would go direct") {
		t.Errorf("after setting JAVA_TOOL_OPTIONS as advised, java still goes direct:\n%s", after)
	}
	// The doctor's NO_PROXY advice, applied, quiets the no-proxy check.
	add := regexp.MustCompile(`Add (\S+) to NO_PROXY and no_proxy \(plus`).FindStringSubmatch(out)
	if add == nil {
		t.Fatalf("no NO_PROXY advice:\n%s", out)
	}
	np := ".svc," + add[1]
	after = doctor(append(proxyEnv, "NO_PROXY="+np, "no_proxy="+np), "--echo", "http://192.0.2.10:8080/", "--client", "java,go")
	if strings.Contains(after, "fail    no-proxy") {
		t.Errorf("after adding %s as advised, the no-proxy check still fails:\n%s", add[1], after)
	}
	// A loopback echo: the cause is loopback, not a missing variable.
	out = doctor(proxyEnv, "--echo", "http://127.0.0.1:8080/", "--client", "go")
	if strings.Contains(out, "set both") || !strings.Contains(out, "never sends localhost or a loopback address to a proxy") {
		t.Errorf("loopback echo advice:\n%s", out)
	}
	for _, m := range printedCommand.FindAllStringSubmatch(out, -1) {
		parses(t, m[1])
		seen++
	}

	// egret node render: the drop-in's check command and the steps.
	var nout, nerr bytes.Buffer
	if code := Main([]string{"node", "render", "--runtime", "containerd", "--proxy", "http://proxy:3128", "--registry", "registry.internal:5000"}, nil, &nout, &nerr); code != 0 {
		t.Fatalf("node render: %s", nerr.String())
	}
	check := regexp.MustCompile(`# Check with: (egret .*)`).FindStringSubmatch(nout.String())
	if check == nil || !strings.Contains(check[1], "--registry registry.internal:5000") {
		t.Fatalf("no check command in the drop-in:\n%s", nout.String())
	}
	parses(t, check[1])
	steps := regexp.MustCompile(`then run: (.*)`).FindStringSubmatch(nerr.String())
	if steps == nil || steps[1] != "systemctl daemon-reload && systemctl restart containerd" {
		t.Errorf("steps %q, want the reload and restart of containerd.service", steps)
	}
	if seen < 6 {
		t.Errorf("only %d printed commands found: the test checks too little", seen)
	}
}

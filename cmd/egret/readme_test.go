package main

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
)

// quickStart returns the lines of README's quick start block.
func quickStart(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Quick start\n\n```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README has no quick start block")
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if cmd, _, _ := strings.Cut(l, "#"); strings.TrimSpace(cmd) != "" {
			lines = append(lines, strings.TrimSpace(cmd))
		}
	}
	return lines
}

func line(t *testing.T, lines []string, prefix string) []string {
	t.Helper()
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return strings.Fields(strings.TrimSuffix(l, "&"))
		}
	}
	t.Fatalf("the quick start has no line starting %q", prefix)
	return nil
}

// TestQuickStart runs README's quick start as a new user would: `make
// build` must give one static binary (no PT_INTERP: no dynamic loader, no
// libc), which starts the proxy the next line starts, and the curl line
// must get its answer through it. The proxy and curl run in a network
// namespace of their own, where example.com is an egret echo server on
// loopback, so nothing leaves the machine and port 3128 is free.
func TestQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary with make")
	}
	lines := quickStart(t)
	if got := line(t, lines, "make build"); len(got) != 2 {
		t.Fatalf("build line %q", got)
	}
	testutil.NeedTool(t, "make")
	dir := t.TempDir()
	bin := filepath.Join(dir, "egret")
	out, err := exec.Command("make", "-C", "../..", "build", "BIN="+bin).CombinedOutput()
	if err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("make build wrote a dynamically linked binary (PT_INTERP): not the one static binary README promises")
		}
	}
	f.Close()
	if v, err := exec.Command(bin, "version").Output(); err != nil || !strings.Contains(string(v), "commit ") {
		t.Errorf("%s version: %q %v (make build stamps the commit)", bin, v, err)
	}

	proxyArgs := line(t, lines, "bin/egret proxy")
	curlArgs := line(t, lines, "curl -x")
	netns.Require(t, "curl")
	ns := netns.New(t, "quickstart")
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 example.com\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(argv ...string) *testutil.SyncBuffer {
		log := &testutil.SyncBuffer{}
		cmd := ns.Command(ctx, argv...)
		cmd.Env = append(os.Environ(), "EGRET_HOSTS_FILE="+hosts)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return log
	}
	start(bin, "echo", "--listen", "127.0.0.1:80")
	proxyLog := start(append([]string{bin}, proxyArgs[1:]...)...)
	var got []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		// Until the proxy and the echo server listen (a 502 while the
		// echo server starts is still an answer: keep asking).
		got, err = ns.Command(ctx, curlArgs...).CombinedOutput()
		if err == nil && strings.Contains(string(got), `"remote_ip"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || !strings.Contains(string(got), `"remote_ip"`) {
		t.Fatalf("%s: %v\n%s\nproxy log:\n%s", strings.Join(curlArgs, " "), err, got, proxyLog)
	}
	// The request went through egret: its access log says so.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(proxyLog.String(), `"url":"http://example.com/"`); {
		if time.Now().After(deadline) {
			t.Fatalf("no access log line for example.com:\n%s", proxyLog)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

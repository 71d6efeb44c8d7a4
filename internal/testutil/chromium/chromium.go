// Package chromium runs headless Chromium (Debian's chromium package) for
// tests of pages egret serves: the DOM after scripts ran, or a screenshot.
// It only ever loads the URL it is given (loopback in egret's tests), with
// background networking, component updates and sync turned off.
package chromium

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

func args(t testing.TB, extra ...string) []string {
	return append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-default-apps", "--mute-audio",
		"--user-data-dir=" + t.TempDir(),
	}, extra...)
}

func bin(t testing.TB) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return testutil.NeedTool(t, "chromium")
}

// DumpDOM loads url and returns the serialised DOM once the page has
// loaded and its scripts have run.
func DumpDOM(t testing.TB, url string) string {
	t.Helper()
	b := bin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, b, args(t, "--virtual-time-budget=2000", "--dump-dom", url)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\n%s", url, err, stderr.String())
	}
	return string(out)
}

// Screenshot saves a PNG of url (width x height) to path.
func Screenshot(t testing.TB, url, path string, width, height int) {
	t.Helper()
	b := bin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	abs, _ := filepath.Abs(path)
	cmd := exec.CommandContext(ctx, b, args(t, "--virtual-time-budget=2000", "--hide-scrollbars",
		"--window-size="+itoa(width)+","+itoa(height), "--screenshot="+abs, url)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if len(l.b) < 16<<10 {
		l.b = append(l.b, p...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

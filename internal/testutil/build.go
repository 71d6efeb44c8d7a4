package testutil

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"egret.io/egret/internal/testutil/golden"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// EgretBinary builds the egret binary once per test process and returns its
// path. Every package builds it with the flags of `make build` (static,
// CGO-free, -trimpath; the version stamp is link-only), so after the first
// package, and after a `make build`, the Go build cache leaves only the
// link step.
func EgretBinary() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "egret-bin-")
		if err != nil {
			buildErr = err
			return
		}
		os.Chmod(dir, 0o755) // tests also run it as other users (setpriv)
		buildPath = filepath.Join(dir, "egret")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", buildPath, "egret.io/egret/cmd/egret")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New("go build egret: " + err.Error() + "\n" + string(out))
		}
	})
	return buildPath, buildErr
}

// Main runs a package's tests and then removes the binary EgretBinary
// built, if any: a package whose tests build it calls Main from TestMain,
// so no test run leaves a copy of egret in the temporary directory.
func Main(m *testing.M) {
	code := golden.After(m.Run())
	RemoveEgretBinary()
	os.Exit(code)
}

// RemoveEgretBinary removes the binary EgretBinary built, if any: for a
// TestMain that cannot use Main (kubetest.Main runs the tests).
func RemoveEgretBinary() {
	if buildPath != "" {
		os.RemoveAll(filepath.Dir(buildPath))
	}
}

// BuildEgret is EgretBinary for a test: it fails the test when the build
// fails.
func BuildEgret(t testing.TB) string {
	t.Helper()
	p, err := EgretBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

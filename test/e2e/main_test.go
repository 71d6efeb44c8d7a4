package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// egretBin is the binary under test, built once by TestMain.
var egretBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "egret-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	egretBin = filepath.Join(dir, "egret")
	build := exec.Command("go", "build", "-o", egretBin, "egret.io/egret/cmd/egret")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build egret:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

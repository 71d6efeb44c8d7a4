package testutil

import (
	"os"
	"path/filepath"
)

// CacheDir is where scripts/deps puts what the tests use and does not come
// from a package manager (the kube-apiserver build, the iptables image's
// Debian packages): $EGRET_CACHE, else ~/.cache/egret. Tests read it and
// never download into it.
func CacheDir() string {
	if d := os.Getenv("EGRET_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "egret")
}

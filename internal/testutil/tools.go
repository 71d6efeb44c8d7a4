package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// CachedTool returns $EGRET_CACHE/tools/name (helm, kubeconform, promtool
// from scripts/deps/50-deploy-tools.sh), or skips the test (fails it under
// EGRET_REQUIRE_ALL=1) when it is not there.
func CachedTool(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(CacheDir(), "tools", name)
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		Missing(t, p+" not found (run scripts/deps/50-deploy-tools.sh or make test-deps)")
	}
	return p
}

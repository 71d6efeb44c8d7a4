package lint

import (
	"path/filepath"
	"testing"

	goldenfile "egret.io/egret/internal/testutil/golden"
)

// goldenDir holds the *.golden files; every one must be used by a test.
const goldenDir = "testdata/golden"

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join(goldenDir, name), got)
}

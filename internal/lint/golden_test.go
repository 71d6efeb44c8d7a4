package lint

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// goldenDir holds the *.golden files; every one must be used by a test.
const goldenDir = "testdata/golden"

var (
	goldenMu   sync.Mutex
	goldenUsed = map[string]bool{}
)

// golden compares got with testdata/golden/name, or rewrites the file when
// EGRET_UPDATE_GOLDEN=1.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join(goldenDir, name)
	goldenMu.Lock()
	goldenUsed[name] = true
	goldenMu.Unlock()
	if os.Getenv("EGRET_UPDATE_GOLDEN") == "1" {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with EGRET_UPDATE_GOLDEN=1 to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (EGRET_UPDATE_GOLDEN=1 rewrites it)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// checkUnusedGoldens fails when a golden file was not compared by any test;
// called from TestMain after the tests ran (only on a full run).
func checkUnusedGoldens() []string {
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		return nil
	}
	var unused []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".golden") && !goldenUsed[e.Name()] {
			unused = append(unused, e.Name())
		}
	}
	sort.Strings(unused)
	return unused
}

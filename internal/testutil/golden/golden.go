// Package golden compares what tests produce with golden files under a
// package's testdata, rewrites them with EGRET_UPDATE_GOLDEN=1, and fails
// a package's full run when a golden file no test compared is left
// behind (After, which testutil.Main and kubetest.Main call). Imported only
// by tests.
package golden

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Update reports whether golden files are rewritten (EGRET_UPDATE_GOLDEN=1).
func Update() bool { return os.Getenv("EGRET_UPDATE_GOLDEN") == "1" }

var (
	mu   sync.Mutex
	used = map[string]bool{}
)

// Check compares got with the golden file at path (relative to the
// package's directory, usually under testdata), or writes it when Update.
// The file counts as used.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	path = filepath.Clean(path)
	mu.Lock()
	used[path] = true
	mu.Unlock()
	if Update() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (EGRET_UPDATE_GOLDEN=1 writes it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (EGRET_UPDATE_GOLDEN=1 rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// Unused returns the golden files (names holding ".golden") under dir that
// no Check of this run compared.
func Unused(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".golden") {
			mu.Lock()
			u := used[filepath.Clean(p)]
			mu.Unlock()
			if !u {
				out = append(out, p)
			}
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// After is called with a package's test result: after a full run that
// passed (no -run filter, not -short, no update), a golden file under
// testdata that no test compared fails it.
func After(code int) int {
	if code != 0 || Update() || testing.Short() {
		return code
	}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return code
	}
	if unused := Unused("testdata"); len(unused) > 0 {
		fmt.Fprintln(os.Stderr, "FAIL: golden files no test compares (remove them, or the test that should):", strings.Join(unused, ", "))
		return 1
	}
	return code
}

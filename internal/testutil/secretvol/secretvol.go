// Package secretvol lays out a directory the way the kubelet mounts a
// Secret or ConfigMap volume, and updates it the way the kubelet does: the
// files are symlinks through "..data", which points at a timestamped
// directory; an update writes a new timestamped directory, points
// "..data_tmp" at it, renames "..data_tmp" over "..data" (one atomic step)
// and removes the old directory.
package secretvol

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"
)

// Volume is a kubelet-style volume directory.
type Volume struct {
	Dir string
	mu  sync.Mutex
	cur string // current timestamped directory name
	n   int
}

// New creates the volume with files (name → content) in a temporary
// directory removed when the test ends.
func New(t testing.TB, files map[string]string) *Volume {
	t.Helper()
	v := &Volume{Dir: t.TempDir()}
	if err := v.write(files); err != nil {
		t.Fatal(err)
	}
	return v
}

// Update swaps the volume's content atomically, as the kubelet does.
func (v *Volume) Update(t testing.TB, files map[string]string) {
	t.Helper()
	if err := v.write(files); err != nil {
		t.Fatal(err)
	}
}

func (v *Volume) write(files map[string]string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.n++
	ts := fmt.Sprintf("..%s.%09d", time.Now().UTC().Format("2006_01_02_15_04_05"), v.n)
	dir := filepath.Join(v.Dir, ts)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name, content := range files {
		names = append(names, name)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	sort.Strings(names)
	tmp := filepath.Join(v.Dir, "..data_tmp")
	os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		return err
	}
	for _, name := range names {
		link := filepath.Join(v.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	if v.cur != "" {
		os.RemoveAll(filepath.Join(v.Dir, v.cur))
	}
	v.cur = ts
	return nil
}

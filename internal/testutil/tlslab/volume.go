package tlslab

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Volume is a directory laid out as the kubelet lays out a ConfigMap
// volume: each file is a symlink through ..data to a timestamped directory,
// and an update swaps ..data atomically (rename), so a reader sees the old
// files or the new ones, never a mix.
type Volume struct {
	Dir string
	gen int
}

// NewVolume makes an empty volume directory.
func NewVolume(t testing.TB) *Volume {
	t.Helper()
	return &Volume{Dir: t.TempDir()}
}

// Write replaces the volume's content with files (name → data).
func (v *Volume) Write(t testing.TB, files map[string][]byte) {
	t.Helper()
	v.gen++
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", v.gen, v.gen)
	if err := os.Mkdir(filepath.Join(v.Dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(v.Dir, ts, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(v.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
}

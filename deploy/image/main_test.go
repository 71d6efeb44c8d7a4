package main

import (
	"archive/tar"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"egret.io/egret/internal/testutil"
)

// TestImageTarball builds the real static egret binary, writes the image
// tarball, loads it back as an image loader does, and runs /egret from it.
func TestImageTarball(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the egret binary")
	}
	dir := t.TempDir()
	bin := testutil.BuildEgret(t)
	out := filepath.Join(dir, "egret.tar")
	o := Options{Binary: bin, CACerts: "/etc/ssl/certs/ca-certificates.crt", Arch: runtime.GOARCH, Version: "test"}
	d1, err := Write(o, out, "ghcr.io/egret-io/egret:test")
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("ghcr.io/egret-io/egret:test")
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("load tarball: %v", err)
	}
	built, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := built.ConfigName()
	if got, err := img.ConfigName(); err != nil || got != want {
		t.Errorf("loaded config digest %v (%v), built %v", got, err, want)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "1337:1337" || strings.Join(cf.Config.Entrypoint, " ") != "/egret" || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config: user %q entrypoint %q os %s arch %s", cf.Config.User, cf.Config.Entrypoint, cf.OS, cf.Architecture)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v: want one (empty base)", len(layers), err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = true
		if h.Name == "egret" {
			if h.Mode&0o111 == 0 {
				t.Errorf("/egret mode %o", h.Mode)
			}
			extracted := filepath.Join(dir, "from-image")
			f, err := os.OpenFile(extracted, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
			v, err := exec.Command(extracted, "version").Output()
			if err != nil || !strings.HasPrefix(string(v), "egret ") {
				t.Errorf("/egret version: %q %v", v, err)
			}
		}
	}
	for _, want := range []string{"egret", "etc/passwd", "etc/group", "tmp"} {
		if !seen[want] {
			t.Errorf("image lacks /%s (has %v)", want, seen)
		}
	}
	// Reproducible: the same inputs give the same digest.
	d2, err := Write(o, filepath.Join(dir, "again.tar"), "ghcr.io/egret-io/egret:test")
	if err != nil || d2 != d1 {
		t.Errorf("rebuild digest %v, first %v (%v)", d2, d1, err)
	}
}

func TestBuildRejectsNonELF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(Options{Binary: p, Arch: "amd64"}); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("err = %v", err)
	}
	if _, err := Build(Options{Binary: "/nonexistent", Arch: "amd64"}); err == nil {
		t.Error("missing binary accepted")
	}
}

//go:build linux

package main

import (
	"archive/tar"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
)

// iptablesDebs returns the cached Debian packages of the iptables layer,
// which scripts/deps/25-image-debs.sh downloads (with the script `make
// image-iptables` uses): the tests never download.
func iptablesDebs(t *testing.T) string {
	t.Helper()
	testutil.NeedTool(t, "dpkg-deb")
	dir := filepath.Join(testutil.CacheDir(), "image-debs")
	if m, _ := filepath.Glob(filepath.Join(dir, "iptables_*.deb")); len(m) == 0 {
		testutil.Missing(t, "no iptables packages in "+dir+" (run scripts/deps/25-image-debs.sh or make test-deps)")
	}
	return dir
}

// unpack writes the image's filesystem (all layers flattened) under root,
// as a container runtime would.
func unpack(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Clean(h.Name)
		if strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			t.Fatalf("image has an entry outside its root: %q", h.Name)
		}
		p := filepath.Join(root, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode)&0o7777|0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeSymlink:
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.Symlink(h.Linkname, p); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			os.MkdirAll(filepath.Dir(p), 0o755)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o7777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		default:
			t.Fatalf("unexpected entry type %c for %s", h.Typeflag, h.Name)
		}
	}
}

// inContainer is the shell prelude that makes root look like a container's
// filesystem (/proc, and /dev with null, as a runtime provides), then runs
// the command chrooted. `ip netns exec` gives it a private mount namespace,
// so none of these mounts is visible outside.
const inContainer = `set -e
root=$1; shift
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=755 tmpfs "$root/dev"
touch "$root/dev/null"
mount --bind /dev/null "$root/dev/null"
exec chroot "$root" "$@"`

// TestIptablesImage builds the iptables image variant from real Debian
// packages, unpacks it, and runs `egret iptables apply` (with its
// validation probe) and `remove` from it, chrooted into the unpacked image
// inside fresh network namespaces, with iptables-nft and iptables-legacy.
// The host's own iptables-save checks the result.
func TestIptablesImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the egret binary and an image from Debian packages")
	}
	netns.Require(t, "chroot", "mount", "sh", "iptables-nft-save", "iptables-legacy-save")
	debs := iptablesDebs(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "egret")
	goBuild(t, runtime.GOARCH, "egret.io/egret/cmd/egret", bin)
	o := Options{Stamp: labelsStamp(), IptablesDebs: debs}
	out := filepath.Join(dir, "egret-iptables-oci")
	b, err := BuildIndex(o, []Platform{{"linux", runtime.GOARCH, bin}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := WriteLayout(out, b.Index, "ghcr.io/egret-io/egret:test-iptables")
	if err != nil {
		t.Fatal(err)
	}
	lp, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	top, _ := lp.ImageIndex()
	idx, err := top.ImageIndex(d)
	if err != nil {
		t.Fatalf("read the layout back: %v", err)
	}
	im, _ := idx.IndexManifest()
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatalf("read the image back: %v", err)
	}
	out = filepath.Join(out, "blobs")
	var size int64
	filepath.Walk(out, func(_ string, fi os.FileInfo, _ error) error {
		if fi != nil && !fi.IsDir() {
			size += fi.Size()
		}
		return nil
	})
	t.Logf("iptables image layout: %d bytes of blobs", size)

	t.Run("layers-and-config", func(t *testing.T) {
		layers, err := img.Layers()
		if err != nil || len(layers) != 2 {
			t.Fatalf("%d layers (%v), want the egret layer and the iptables layer", len(layers), err)
		}
		plain, err := Build(Options{Binary: bin, Arch: runtime.GOARCH, Stamp: labelsStamp()})
		if err != nil {
			t.Fatal(err)
		}
		pl, _ := plain.Layers()
		d1, _ := pl[0].Digest()
		d2, _ := layers[0].Digest()
		if d1 != d2 {
			t.Errorf("the egret layer differs from the plain image's (%s vs %s): registries cannot share it", d2, d1)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if !containsPrefix(cf.Config.Env, "PATH=/usr/sbin:") {
			t.Errorf("env %v lacks a PATH with /usr/sbin", cf.Config.Env)
		}
		if v := cf.Config.Labels["io.egret.iptables"]; v == "" {
			t.Errorf("labels %v lack io.egret.iptables", cf.Config.Labels)
		}
	})

	root := filepath.Join(dir, "rootfs")
	unpack(t, img, root)
	for _, d := range []string{"proc", "dev"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	cf, _ := img.ConfigFile()

	for i, backend := range []string{"nft", "legacy"} {
		t.Run("apply-and-remove-from-the-image-"+backend, func(t *testing.T) {
			pod, outside := netns.New(t, "img-"+backend), netns.New(t, "img-out")
			netns.Link(t, pod, outside, []string{"10.254." + strconv.Itoa(i) + ".1/24"}, []string{"10.254." + strconv.Itoa(i) + ".2/24"})
			ln, err := pod.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run := func(argv ...string) string {
				t.Helper()
				cmd := pod.Command(ctx, append([]string{"sh", "-c", inContainer, "sh", root}, argv...)...)
				cmd.Env = cf.Config.Env
				b, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("in the image: %s: %v\n%s", strings.Join(argv, " "), err, b)
				}
				return string(b)
			}
			flags := []string{"--backend", backend, "--proxy-uid", "1337", "--redirect-port", port, "--exclude-cidrs", "10.96.0.0/12"}
			// apply validates: a probe connection must really be redirected.
			run(append([]string{"/egret", "iptables", "apply", "--probe-addr", "10.254." + strconv.Itoa(i) + ".2:80"}, flags...)...)
			hostSave := pod.Run(t, "iptables-"+backend+"-save", "-t", "nat")
			if !strings.Contains(hostSave, ":EGRET_OUTPUT") || !strings.Contains(hostSave, "--to-ports "+port) {
				t.Fatalf("after apply from the image, the host's iptables-%s-save shows:\n%s", backend, hostSave)
			}
			if imageSave := run("iptables-"+backend+"-save", "-t", "nat"); !strings.Contains(imageSave, ":EGRET_OUTPUT") {
				t.Errorf("the image's iptables-%s-save shows:\n%s", backend, imageSave)
			}
			run(append([]string{"/egret", "iptables", "remove"}, flags...)...)
			for _, l := range strings.Split(pod.Run(t, "iptables-"+backend+"-save", "-t", "nat"), "\n") {
				if strings.HasPrefix(l, "-A ") || strings.Contains(l, "EGRET") {
					t.Errorf("after remove from the image: %q", l)
				}
			}
		})
	}
}

// TestIptablesLayerNeedsEveryLibrary refuses to build an image whose
// iptables could not start: without libc6 the programs' loader and
// libc.so.6 are missing.
func TestIptablesLayerNeedsEveryLibrary(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the cached Debian packages of the iptables layer")
	}
	debs := iptablesDebs(t)
	partial := t.TempDir()
	m, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	for _, f := range m {
		if strings.HasPrefix(filepath.Base(f), "libc6_") {
			continue
		}
		if err := os.Symlink(f, filepath.Join(partial, filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	_, err := IptablesLayerFiles(partial, runtime.GOARCH)
	if err == nil || !strings.Contains(err.Error(), "image-debs.sh") ||
		!strings.Contains(err.Error(), "libc.so.6") && !strings.Contains(err.Error(), "ld-linux") {
		t.Fatalf("err = %v, want one naming libc6's loader or libc.so.6, and the download script", err)
	}
	if _, err := IptablesLayerFiles(t.TempDir(), runtime.GOARCH); err == nil || !strings.Contains(err.Error(), "no .deb files") {
		t.Errorf("empty directory: err = %v", err)
	}
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

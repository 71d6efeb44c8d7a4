package main

import (
	"archive/tar"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"egret.io/egret/internal/testutil"
)

// imageDebs returns the cached Debian packages of the images
// (scripts/deps/25-image-debs.sh): the tests never download.
func imageDebs(t *testing.T) string {
	t.Helper()
	testutil.NeedTool(t, "dpkg-deb")
	dir := filepath.Join(testutil.CacheDir(), "image-debs")
	for _, pat := range []string{"ca-certificates_*_all.deb", "base-files_*_amd64.deb", "base-files_*_arm64.deb", "iptables_*_arm64.deb"} {
		if m, _ := filepath.Glob(filepath.Join(dir, pat)); len(m) == 0 {
			testutil.Missing(t, "no "+pat+" in "+dir+" (run scripts/deps/25-image-debs.sh or make test-deps)")
		}
	}
	return dir
}

// filesOf flattens an image's layers into path → content.
func filesOf(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeSymlink {
			out[h.Name] = "-> " + h.Linkname
		} else {
			out[h.Name] = string(b)
		}
	}
}

// TestImagesFromDebianPackages builds both images for both platforms from
// the cached packages, as make release does, and checks what scanners and
// TLS clients read: the root CAs of the pinned ca-certificates (not the
// build machine's), /etc/os-release, a dpkg status database naming every
// package the image took files from — in its architecture — and SBOMs
// listing the same packages with their package URLs.
func TestImagesFromDebianPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and four images")
	}
	debs := imageDebs(t)
	dir := t.TempDir()
	var plats []Platform
	for _, arch := range []string{"amd64", "arm64"} {
		bin := filepath.Join(dir, arch)
		goBuild(t, arch, "./testdata/stamped", bin)
		plats = append(plats, Platform{"linux", arch, bin})
	}
	pkgs, err := debsFor(debs, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	ca := find(pkgs, "ca-certificates")
	for _, iptables := range []bool{false, true} {
		o := Options{Stamp: labelsStamp(), Debs: debs}
		if iptables {
			o.IptablesDebs = debs
		}
		b, err := BuildIndex(o, plats)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range plats {
			key := "linux/" + p.Arch
			img := b.Images[key]
			files := filesOf(t, img)
			// The CA bundle: every certificate of the package, parsed.
			bundle := files["etc/ssl/certs/ca-certificates.crt"]
			n, rest := 0, []byte(bundle)
			for {
				var blk *pem.Block
				if blk, rest = pem.Decode(rest); blk == nil {
					break
				}
				if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
					t.Errorf("%s: a certificate of the bundle does not parse: %v", key, err)
				}
				n++
			}
			if n < 100 || strings.TrimSpace(string(rest)) != "" {
				t.Errorf("%s: bundle has %d certificates (and %d bytes after them)", key, n, len(rest))
			}
			if !strings.Contains(files["usr/lib/os-release"], `ID=debian`) || files["etc/os-release"] != "-> ../usr/lib/os-release" {
				t.Errorf("%s: os-release %q, link %q", key, files["usr/lib/os-release"], files["etc/os-release"])
			}
			if !strings.Contains(files["usr/share/doc/ca-certificates/copyright"], "Mozilla") {
				t.Errorf("%s: no copyright file of ca-certificates", key)
			}
			status := files["var/lib/dpkg/status"]
			want := []string{"Package: base-files\nStatus: install ok installed\n", "Package: ca-certificates\nStatus: install ok installed\n",
				"Version: " + ca.Version + "\n"}
			if iptables {
				want = append(want, "Package: iptables\nStatus: install ok installed\n", "Package: libc6\nStatus: install ok installed\n",
					"Package: libnftnl11\n")
			}
			for _, w := range want {
				if !strings.Contains(status, w) {
					t.Errorf("%s (iptables %v): dpkg status lacks %q:\n%s", key, iptables, w, status)
				}
			}
			if strings.Contains(status, "Architecture: "+otherDebArch(p.Arch)) {
				t.Errorf("%s: dpkg status names a package of another architecture", key)
			}
			if !iptables && strings.Contains(status, "Package: iptables") {
				t.Errorf("the plain image's dpkg status names iptables")
			}
			cf, _ := img.ConfigFile()
			if cf.Config.Labels["io.egret.ca-certificates"] != ca.Version {
				t.Errorf("%s: labels %v", key, cf.Config.Labels)
			}
			// The SBOM lists the same packages, with purls scanners match.
			var doc spdx
			if err := json.Unmarshal(b.SBOMs[key], &doc); err != nil {
				t.Fatal(err)
			}
			purls := map[string]bool{}
			for _, pk := range doc.Packages {
				for _, r := range pk.ExternalRefs {
					purls[r.Locator] = true
				}
			}
			wantPurls := []string{"pkg:deb/debian/ca-certificates@" + ca.Version + "?arch=all&distro=debian-12"}
			if iptables {
				wantPurls = append(wantPurls, "pkg:deb/debian/iptables@"+debVersion(pkgs, "iptables")+"?arch="+p.Arch+"&distro=debian-12")
			}
			for _, w := range wantPurls {
				if !purls[w] {
					t.Errorf("%s SBOM lacks %s", key, w)
				}
			}
		}
	}
}

func otherDebArch(arch string) string {
	if arch == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// TestCABundleOrder: the bundle is the certificates in the C-locale order
// of their paths, each ending in a newline, as update-ca-certificates
// writes it.
func TestCABundleOrder(t *testing.T) {
	tree := map[string]*debEntry{
		"usr/share/ca-certificates/mozilla/b.crt": {typ: tar.TypeReg, data: []byte("B")},
		"usr/share/ca-certificates/mozilla/A.crt": {typ: tar.TypeReg, data: []byte("A\n")},
		"usr/share/ca-certificates/mozilla/a.crt": {typ: tar.TypeReg, data: []byte("a\n")},
		"usr/share/doc/ca-certificates/README":    {typ: tar.TypeReg, data: []byte("no")},
	}
	b, n, err := caBundle(tree)
	if err != nil || n != 3 || string(b) != "A\na\nB\n" {
		t.Errorf("caBundle = %q, %d, %v", b, n, err)
	}
	if _, _, err := caBundle(map[string]*debEntry{}); err == nil {
		t.Error("an empty package made a bundle")
	}
}

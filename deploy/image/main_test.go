package main

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"egret.io/egret/internal/version"
)

// stamp is the build identity the tests build with, as make does.
var stamp = version.Info{Version: "v9.8.7-3-gfeedbee-dirty", Commit: "feedbeefeedbeefeedbeefeedbeefeedbeefeedb", Dirty: true, BuildDate: "2026-02-03T04:05:06Z"}

func labelsStamp() Stamp {
	return Stamp{Version: stamp.Version, Revision: stamp.Commit, Created: stamp.BuildDate}
}

// goBuild builds pkg like `make build` (static, -trimpath) with the test
// stamp; the module's packages are compiled once for all such builds.
func goBuild(t *testing.T, goarch, pkg, out string, extra ...string) {
	t.Helper()
	ld := "-s -w " + version.LDFlags(stamp) + " " + strings.Join(extra, " ")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ld, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s for %s: %v\n%s", pkg, goarch, err, b)
	}
}

// otherArch is the second platform of the test index.
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// TestImageLayout builds what `make image` builds: the stamped static
// egret for this machine and a stamped binary for the other platform, the
// index with both images and their SBOMs, written as an OCI layout. It reads
// the layout back, runs /egret from the image, and checks that the labels,
// `egret version` and the egret_build_info metric tell the same version,
// commit and date.
func TestImageLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the egret binary")
	}
	dir := t.TempDir()
	host := filepath.Join(dir, "egret-host")
	goBuild(t, runtime.GOARCH, "egret.io/egret/cmd/egret", host)
	// The other platform's image only needs a stamped static binary
	// (testdata/stamped): the test does not compile all of egret twice.
	other := filepath.Join(dir, "other")
	goBuild(t, otherArch(), "./testdata/stamped", other)

	o := Options{CACerts: "/etc/ssl/certs/ca-certificates.crt", Stamp: labelsStamp()}
	plats := []Platform{{"linux", runtime.GOARCH, host}, {"linux", otherArch(), other}}
	b, err := BuildIndex(o, plats)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "egret-oci")
	d1, err := WriteLayout(out, b.Index, "ghcr.io/egret-io/egret:v9.8.7")
	if err != nil {
		t.Fatal(err)
	}

	// The layout: one entry (what crane push and skopeo take), the tag.
	lp, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, _ := top.IndexManifest()
	if len(tm.Manifests) != 1 || tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v9.8.7" || tm.Manifests[0].Digest != d1 {
		t.Fatalf("index.json: %+v", tm.Manifests)
	}
	idx, err := top.ImageIndex(d1)
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	images := map[string]v1.Descriptor{}
	sboms := map[string]v1.Descriptor{}
	for _, m := range im.Manifests {
		switch {
		case m.ArtifactType == SPDXMediaType:
			if m.Platform == nil || m.Platform.OS != "unknown" {
				t.Errorf("SBOM entry %s has platform %v: a runtime could take it for the image", m.Digest, m.Platform)
			}
			sboms[m.Digest.String()] = m
		case m.Platform != nil:
			images[m.Platform.OS+"/"+m.Platform.Architecture] = m
		}
	}
	if len(images) != 2 || len(sboms) != 2 || len(im.Manifests) != 4 {
		t.Fatalf("image index: %d images (%v), %d SBOMs, %d entries", len(images), images, len(sboms), len(im.Manifests))
	}
	if im.Manifests[0].ArtifactType == SPDXMediaType || im.Manifests[1].ArtifactType == SPDXMediaType {
		t.Error("the SBOMs come before the images")
	}
	for plat, desc := range images {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		if cf.OS+"/"+cf.Architecture != plat || cf.Config.User != "1337:1337" || strings.Join(cf.Config.Entrypoint, " ") != "/egret" {
			t.Errorf("%s config: %s/%s user %q entrypoint %q", plat, cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint)
		}
		want := map[string]string{"org.opencontainers.image.version": stamp.Version, "org.opencontainers.image.revision": stamp.Commit, "org.opencontainers.image.created": stamp.BuildDate}
		for k, v := range want {
			if cf.Config.Labels[k] != v {
				t.Errorf("%s label %s = %q, want %q", plat, k, cf.Config.Labels[k], v)
			}
		}
		if got := cf.Created.UTC().Format(time.RFC3339); got != stamp.BuildDate {
			t.Errorf("%s created %s, want the build date %s", plat, got, stamp.BuildDate)
		}
		// Its SBOM names it as subject.
		found := false
		for _, s := range sboms {
			art, err := idx.Image(s.Digest)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := art.Manifest()
			if m.Subject != nil && m.Subject.Digest == desc.Digest {
				found = true
				if m.ArtifactType != SPDXMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != SPDXMediaType {
					t.Errorf("SBOM manifest of %s: %+v", plat, m)
				}
			}
		}
		if !found {
			t.Errorf("no SBOM has %s's image as subject", plat)
		}
	}

	// Run /egret from this platform's image.
	img, err := idx.Image(images["linux/"+runtime.GOARCH].Digest)
	if err != nil {
		t.Fatal(err)
	}
	egret := extractFile(t, img, "egret", filepath.Join(dir, "from-image"))
	j, err := exec.Command(egret, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("egret version -o json: %v", err)
	}
	var got version.Info
	if err := json.Unmarshal(j, &got); err != nil {
		t.Fatal(err)
	}
	if got.Version != stamp.Version || got.Commit != stamp.Commit || got.Dirty != stamp.Dirty || got.BuildDate != stamp.BuildDate || got.GoVersion != runtime.Version() {
		t.Errorf("egret version from the image: %+v, want %+v", got, stamp)
	}
	if line, _ := exec.Command(egret, "--version").Output(); !strings.Contains(string(line), stamp.Version) || !strings.Contains(string(line), stamp.Commit+" (dirty)") {
		t.Errorf("egret --version: %q", line)
	}
	labels := buildInfoMetric(t, egret)
	if labels["version"] != stamp.Version || labels["revision"] != stamp.Commit || labels["build_date"] != stamp.BuildDate || labels["goversion"] != runtime.Version() {
		t.Errorf("egret_build_info %v does not agree with the labels (%s, %s, %s)", labels, stamp.Version, stamp.Commit, stamp.BuildDate)
	}

	// The SBOM lists exactly the modules `go version -m` finds in the binary.
	doc := b.SBOMs["linux/"+runtime.GOARCH]
	var s spdx
	if err := json.Unmarshal(doc, &s); err != nil {
		t.Fatal(err)
	}
	if s.SPDXVersion != "SPDX-2.3" || s.Packages[0].Name != "egret.io/egret" || s.Packages[0].VersionInfo != stamp.Version || len(s.Relationships) != len(s.Packages) {
		t.Errorf("SBOM head: %s %+v, %d relationships for %d packages", s.SPDXVersion, s.Packages[0], len(s.Relationships), len(s.Packages))
	}
	var inSBOM []string
	for _, p := range s.Packages[2:] {
		inSBOM = append(inSBOM, p.Name+" "+p.VersionInfo)
	}
	mv, err := exec.Command("go", "version", "-m", host).Output()
	if err != nil {
		t.Fatal(err)
	}
	var inBinary []string
	for _, l := range strings.Split(string(mv), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "dep" {
			inBinary = append(inBinary, f[1]+" "+f[2])
		}
		if len(f) >= 3 && f[0] == "=>" {
			inBinary[len(inBinary)-1] = f[1] + " " + f[2]
		}
	}
	sort.Strings(inSBOM)
	sort.Strings(inBinary)
	if len(inBinary) < 20 || !reflect.DeepEqual(inSBOM, inBinary) {
		t.Errorf("SBOM modules (%d) differ from go version -m (%d):\nSBOM %v\nbinary %v", len(inSBOM), len(inBinary), inSBOM, inBinary)
	}

	// Reproducible: the same inputs give the same index digest.
	b2, err := BuildIndex(o, plats)
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := b2.Index.Digest(); d2 != d1 {
		t.Errorf("rebuild digest %v, first %v", d2, d1)
	}

	// What the builder refuses.
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"other-arch", Options{Binary: other, Arch: runtime.GOARCH, Stamp: labelsStamp()}, "binary, not " + runtime.GOARCH},
		{"other-version", Options{Binary: host, Arch: runtime.GOARCH, Stamp: Stamp{Version: "v1.2.3-4-gabcdef0", Revision: stamp.Commit}}, "not built with version v1.2.3-4-gabcdef0"},
		{"other-commit", Options{Binary: host, Arch: runtime.GOARCH, Stamp: Stamp{Version: stamp.Version, Revision: "0123456789012345678901234567890123456789"}}, "not built with commit 0123456789"},
		{"dynamic", Options{Binary: "/bin/sh", Arch: runtime.GOARCH, Stamp: Stamp{Version: "dev"}}, "dynamically linked"},
		{"bad-created", Options{Binary: host, Arch: runtime.GOARCH, Stamp: Stamp{Version: stamp.Version, Created: "yesterday"}}, "RFC 3339"},
	} {
		if _, err := Build(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// extractFile writes one regular file of the image's filesystem to out.
func extractFile(t *testing.T, img v1.Image, name, out string) string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("image has no /%s", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != name {
			continue
		}
		if h.Mode&0o111 == 0 {
			t.Errorf("/%s mode %o", name, h.Mode)
		}
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return out
	}
}

// buildInfoMetric runs egret proxy from bin and returns egret_build_info's
// labels from its /metrics.
func buildInfoMetric(t *testing.T, bin string) map[string]string {
	t.Helper()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	admin := free()
	cmd := exec.Command(bin, "proxy", "--listen", free(), "--admin-listen", admin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err == nil {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				l := sc.Text()
				if rest, ok := strings.CutPrefix(l, "egret_build_info{"); ok {
					labels := map[string]string{}
					body, _, _ := strings.Cut(rest, "}")
					for _, kv := range strings.Split(body, ",") {
						k, v, _ := strings.Cut(kv, "=")
						labels[k] = strings.Trim(v, `"`)
					}
					return labels
				}
			}
			t.Fatal("no egret_build_info in /metrics")
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin listener never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
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
	for _, bad := range []string{"linux/arm64", "darwin/arm64=x", "linux=x", "linux/=x"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("-binary %q accepted", bad)
		}
	}
}

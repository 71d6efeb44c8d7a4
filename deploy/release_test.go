package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
)

// TestRelease runs make release's script for a version, then has
// sigstore-go's verifier (tools/release verify, built from sigstore's
// libraries, not egret's code) accept every signature and the provenance,
// and refuse a changed file and another key's signatures. It also checks
// what a user installs: the chart at that version pinned by digest to the
// images of the OCI archives, egret.yaml the same, the SBOMs naming the
// iptables image's Debian packages, SHA256SUMS right.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds egret for two platforms, two images and the chart")
	}
	testutil.CachedTool(t, "helm")
	rel := testutil.CachedTool(t, "release")
	if _, err := os.Stat(filepath.Join(testutil.CacheDir(), "image-debs")); err != nil {
		testutil.Missing(t, "no Debian packages for the images in "+filepath.Join(testutil.CacheDir(), "image-debs")+" (scripts/image-debs.sh)")
	}
	dist := t.TempDir()
	keys := t.TempDir()
	env := append(os.Environ(), "COSIGN_PASSWORD=release-test")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	run(rel, "keygen", "-dir", keys)
	const version = "v0.0.0-test.1"
	env = append(env, "VERSION="+version, "DIST="+dist, "COSIGN_KEY="+filepath.Join(keys, "cosign.key"))
	start := time.Now()
	log := run("../scripts/release.sh")
	t.Logf("make release took %s:\n%s", time.Since(start).Round(time.Second), lastLines(log, 4))
	dir := filepath.Join(dist, version)

	want := []string{
		"egret-" + version + ".oci.tar", "egret-iptables-" + version + ".oci.tar", "egret-" + strings.TrimPrefix(version, "v") + ".tgz", "egret.yaml",
		"egret-linux-amd64.spdx.json", "egret-linux-arm64.spdx.json", "egret-iptables-linux-amd64.spdx.json", "egret-iptables-linux-arm64.spdx.json",
		"egret-" + version + ".cosign-payload.json", "egret-iptables-" + version + ".cosign-payload.json", "SHA256SUMS",
	}
	for _, f := range want {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("release lacks %s", f)
		}
		if _, err := os.Stat(filepath.Join(dir, f+".sigstore.json")); err != nil {
			t.Errorf("%s is not signed", f)
		}
	}
	for _, f := range []string{"provenance.sigstore.json", "cosign.pub"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("release lacks %s", f)
		}
	}

	// The real verifier accepts every bundle and the provenance.
	out := run(rel, "verify", "-pub", filepath.Join(dir, "cosign.pub"), "-dir", dir)
	if n := strings.Count(out, "verified "); n != len(want)+1 || !strings.Contains(out, "SLSA provenance of") {
		t.Errorf("verified %d bundles, want %d and the provenance:\n%s", n, len(want)+1, out)
	}

	// ... and refuses a changed file, and another key.
	verifyFails := func(what string, dir, pub string) {
		t.Helper()
		cmd := exec.Command(rel, "verify", "-pub", pub, "-dir", dir)
		if b, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("%s: verified:\n%s", what, b)
		}
	}
	tampered := t.TempDir()
	for _, f := range []string{"egret.yaml", "egret.yaml.sigstore.json"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		if f == "egret.yaml" {
			b = bytes.Replace(b, []byte("egret"), []byte("egrat"), 1)
		}
		os.WriteFile(filepath.Join(tampered, f), b, 0o644)
	}
	verifyFails("a changed egret.yaml", tampered, filepath.Join(dir, "cosign.pub"))
	other := t.TempDir()
	run(rel, "keygen", "-dir", other)
	verifyFails("another key", dir, filepath.Join(other, "cosign.pub"))
	staleProv := t.TempDir()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		f := e.Name()
		if e.IsDir() || (strings.HasSuffix(f, ".sigstore.json") && f != "provenance.sigstore.json") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, f))
		if f == "egret.yaml" {
			b = append(b, "\n# changed after the build\n"...)
		}
		os.WriteFile(filepath.Join(staleProv, f), b, 0o644)
	}
	verifyFails("a file the provenance does not describe", staleProv, filepath.Join(dir, "cosign.pub"))

	// SHA256SUMS is right.
	sums, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, _ := strings.Cut(line, "  ")
		b, err := os.ReadFile(filepath.Join(dir, name))
		if h := sha256.Sum256(b); err != nil || hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match (%v)", name, err)
		}
	}

	// The images: the chart and egret.yaml pin the archives' digests.
	digest := indexDigest(t, filepath.Join(dir, "egret-"+version+".oci.tar"))
	iptDigest := indexDigest(t, filepath.Join(dir, "egret-iptables-"+version+".oci.tar"))
	chart := tgzFiles(t, filepath.Join(dir, "egret-"+strings.TrimPrefix(version, "v")+".tgz"))
	if !strings.Contains(chart["egret/Chart.yaml"], "version: "+strings.TrimPrefix(version, "v")+"\n") {
		t.Errorf("chart version is not the release's:\n%s", chart["egret/Chart.yaml"])
	}
	if v := chart["egret/values.yaml"]; !strings.Contains(v, `digest: "`+digest+`"`) || !strings.Contains(v, "-iptables@"+iptDigest) {
		t.Errorf("the chart's values do not pin %s and %s", digest, iptDigest)
	}
	manifests, _ := os.ReadFile(filepath.Join(dir, "egret.yaml"))
	if !bytes.Contains(manifests, []byte("ghcr.io/egret-io/egret@"+digest)) {
		t.Errorf("egret.yaml does not run ghcr.io/egret-io/egret@%s", digest)
	}
	if bytes.Contains(manifests, []byte(":0.1.0")) {
		t.Error("egret.yaml names the image by the chart's default tag, not the release's")
	}
	payload, _ := os.ReadFile(filepath.Join(dir, "egret-"+version+".cosign-payload.json"))
	var p struct {
		Critical struct {
			Image struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(payload, &p); err != nil || p.Critical.Image.Digest != digest {
		t.Errorf("cosign payload %s (%v), want digest %s", payload, err, digest)
	}

	// egret.yaml applies to the API server as it is (the namespace first).
	kc := kubetest.Require(t)
	c, err := client.New(kc.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, manifests)
	if len(objs) < 10 || objs[0].GetKind() != "Namespace" {
		t.Fatalf("egret.yaml: %d objects, the first a %s; want the namespace first", len(objs), objs[0].GetKind())
	}
	if err := c.Create(context.Background(), objs[0]); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, o := range objs[1:] {
		if err := c.Create(context.Background(), o, client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("egret.yaml: %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	// The iptables image's SBOM names its Debian packages.
	sbom, _ := os.ReadFile(filepath.Join(dir, "egret-iptables-linux-arm64.spdx.json"))
	for _, pkg := range []string{`"iptables"`, `"ca-certificates"`, "pkg:deb/debian/iptables@"} {
		if !bytes.Contains(sbom, []byte(pkg)) {
			t.Errorf("the iptables image's arm64 SBOM does not name %s", pkg)
		}
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// indexDigest reads the digest of the image index an OCI archive names.
func indexDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no index.json (%v)", path, err)
		}
		if h.Name == "./index.json" || h.Name == "index.json" {
			var idx struct {
				Manifests []struct {
					Digest string `json:"digest"`
				} `json:"manifests"`
			}
			if err := json.NewDecoder(tr).Decode(&idx); err != nil || len(idx.Manifests) != 1 {
				t.Fatalf("%s: index.json %+v %v", path, idx, err)
			}
			return idx.Manifests[0].Digest
		}
	}
}

func tgzFiles(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = string(b)
	}
}

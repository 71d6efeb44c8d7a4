package kubenode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testCAPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestRenderCA(t *testing.T) {
	ca := testCAPEM(t, "Corp Root")
	r, err := RenderCA(CAOptions{Runtime: Containerd, CA: ca, Registries: []string{"registry.corp:5000", "docker.io", "_default"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range r.Files {
		got[f.Path] = f.Content
	}
	hosts := got["/etc/containerd/certs.d/registry.corp:5000/hosts.toml"]
	if !strings.Contains(hosts, `server = "https://registry.corp:5000"`) || !strings.Contains(hosts, `ca = "/etc/containerd/certs.d/registry.corp:5000/ca.crt"`) {
		t.Errorf("hosts.toml:\n%s", hosts)
	}
	if !strings.Contains(got["/etc/containerd/certs.d/docker.io/hosts.toml"], `server = "https://registry-1.docker.io"`) {
		t.Errorf("docker.io hosts.toml:\n%s", got["/etc/containerd/certs.d/docker.io/hosts.toml"])
	}
	if d := got["/etc/containerd/certs.d/_default/hosts.toml"]; strings.Contains(d, "server") || !strings.Contains(d, "ca = ") {
		t.Errorf("_default hosts.toml:\n%s", d)
	}
	if !strings.Contains(got["/etc/containerd/certs.d/registry.corp:5000/ca.crt"], "BEGIN CERTIFICATE") || !strings.Contains(r.Note, "no restart") {
		t.Errorf("ca.crt or note: %q", r.Note)
	}
	for _, rt := range []Runtime{CRIO, Docker} {
		r, err := RenderCA(CAOptions{Runtime: rt, CA: ca, Registries: []string{"registry.corp:5000"}})
		if err != nil || len(r.Files) != 1 || !strings.HasSuffix(r.Files[0].Path, "/certs.d/registry.corp:5000/ca.crt") {
			t.Errorf("%s: %+v %v", rt, r, err)
		}
		if _, err := RenderCA(CAOptions{Runtime: rt, CA: ca, Registries: []string{"_default"}}); err == nil {
			t.Errorf("%s accepted _default", rt)
		}
	}
	for _, tc := range []struct {
		name string
		o    CAOptions
	}{
		{"kubelet", CAOptions{Runtime: Kubelet, CA: ca, Registries: []string{"r"}}},
		{"private-key", CAOptions{Runtime: Docker, CA: append(ca, []byte("-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n")...), Registries: []string{"r"}}},
		{"no-registry", CAOptions{Runtime: Docker, CA: ca}},
		{"bad-registry", CAOptions{Runtime: Docker, CA: ca, Registries: []string{"../../etc"}}},
	} {
		if _, err := RenderCA(tc.o); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestInspectCA(t *testing.T) {
	ca := testCAPEM(t, "Corp Root")
	other := testCAPEM(t, "Other Root")
	root := t.TempDir()
	install := func(files []File) {
		for _, f := range files {
			p := filepath.Join(root, f.Path)
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(f.Content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	checks, err := InspectCA(Containerd, root, []string{"registry.corp:5000"}, ca)
	if err != nil || checks[0].OK || !strings.Contains(checks[0].Problem, "config_path") {
		t.Fatalf("no config: %+v %v", checks, err)
	}
	install([]File{{Path: ContainerdConfig, Content: "version = 3\n[plugins.\"io.containerd.cri.v1.images\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n"}})
	if checks, _ = InspectCA(Containerd, root, []string{"registry.corp:5000"}, ca); checks[0].OK || !strings.Contains(checks[0].Problem, "no /etc/containerd/certs.d/registry.corp:5000/hosts.toml") {
		t.Fatalf("no hosts.toml: %+v", checks)
	}
	r, _ := RenderCA(CAOptions{Runtime: Containerd, CA: ca, Registries: []string{"registry.corp:5000"}})
	install(r.Files)
	if checks, _ = InspectCA(Containerd, root, []string{"registry.corp:5000"}, ca); !checks[0].OK || checks[0].CAs[0] != "Corp Root" {
		t.Fatalf("rendered files not accepted: %+v", checks)
	}
	if checks, _ = InspectCA(Containerd, root, []string{"registry.corp:5000"}, other); checks[0].OK || !strings.Contains(checks[0].Problem, "lacks Other Root") {
		t.Fatalf("missing CA not found: %+v", checks)
	}
	// _default covers registries without their own directory.
	r, _ = RenderCA(CAOptions{Runtime: Containerd, CA: ca, Registries: []string{"_default"}})
	install(r.Files)
	if checks, _ = InspectCA(Containerd, root, []string{"quay.io"}, ca); !checks[0].OK {
		t.Fatalf("_default not used: %+v", checks)
	}
	r, _ = RenderCA(CAOptions{Runtime: Docker, CA: ca, Registries: []string{"registry.corp:5000"}})
	install(r.Files)
	if checks, _ = InspectCA(Docker, root, []string{"registry.corp:5000", "ghcr.io"}, ca); !checks[0].OK || checks[1].OK {
		t.Fatalf("docker: %+v", checks)
	}
}

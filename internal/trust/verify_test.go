package trust

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyDir is the sidecar's start check (issue 21, finding 9): a
// bundle egret built passes; a squatter's, a half-replaced one (PEM or
// store alone), a missing file and garbage fail, naming the fix.
func TestVerifyDir(t *testing.T) {
	sys, corp, evil := testCA(t, "System"), testCA(t, "Corp"), testCA(t, "Tenant Intercept CA")
	build := func(certs ...*x509.Certificate) *Bundle {
		b, err := Build(certs[:1], certs[1:])
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good, bad := build(sys, corp), build(sys, evil)
	write := func(t *testing.T, pemFrom, storeFrom *Bundle) string {
		t.Helper()
		dir := t.TempDir()
		if pemFrom != nil {
			if err := os.WriteFile(filepath.Join(dir, BundleFile), pemFrom.PEM(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if storeFrom != nil {
			p, err := storeFrom.TrustStore(nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, TrustStoreFile), p, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	if err := VerifyDir(write(t, good, good), good.Digest()); err != nil {
		t.Fatalf("egret's bundle refused: %v", err)
	}
	for _, tc := range []struct {
		name        string
		pem, store  *Bundle
		want        string
		garbageFile string
	}{
		{name: "squatted", pem: bad, store: bad, want: "not " + good.Digest()[:12]},
		{name: "pem-replaced", pem: bad, store: good, want: "someone replaced ConfigMap egret-trust-bundle"},
		{name: "store-replaced", pem: good, store: bad, want: "restart the pod"},
		{name: "store-missing", pem: good, want: "truststore.p12 is not mounted"},
		{name: "pem-missing", store: good, want: "ca-bundle.pem is not mounted"},
		{name: "pem-garbage", store: good, garbageFile: BundleFile, want: "ca-bundle.pem:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, tc.pem, tc.store)
			if tc.garbageFile != "" {
				if err := os.WriteFile(filepath.Join(dir, tc.garbageFile), []byte("not a certificate"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := VerifyDir(dir, good.Digest())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("VerifyDir = %v, want %q", err, tc.want)
			}
		})
	}
	if c := Read(good.PEM(), nil); c.PEMDigest != good.Digest() || c.StoreDigest != "" || !strings.Contains(c.Problem, TrustStoreFile) || c.Matches(good.Digest()) {
		t.Errorf("Read without a store: %+v", c)
	}
	if (Contents{}).Matches("") {
		t.Error("empty contents match an empty digest")
	}
}

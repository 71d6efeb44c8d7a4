package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSignVerify: keygen, sign and provenance, then sigstore-go's verifier
// accepts the directory, and refuses it once a file changes or with
// another key. (deploy's TestRelease does the same on make release.)
func TestSignVerify(t *testing.T) {
	t.Setenv("COSIGN_PASSWORD", "test")
	dir, keys, other := t.TempDir(), t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(keygen([]string{"-dir", keys}))
	must(keygen([]string{"-dir", other}))
	var files []string
	for _, f := range []string{"a.tgz", "b.yaml"} {
		p := filepath.Join(dir, f)
		must(os.WriteFile(p, []byte("content of "+f), 0o644))
		files = append(files, p)
	}
	key := filepath.Join(keys, "cosign.key")
	must(signFiles(append([]string{"-key", key}, files...)))
	must(provenance(append([]string{"-key", key, "-out", filepath.Join(dir, "provenance.sigstore.json"), "-version", "v1.2.3", "-commit", "0123abcd"}, files...)))
	must(verifyDir([]string{"-pub", filepath.Join(keys, "cosign.pub"), "-dir", dir}))

	if err := verifyDir([]string{"-pub", filepath.Join(other, "cosign.pub"), "-dir", dir}); err == nil || !strings.Contains(err.Error(), "another key") {
		t.Errorf("another key: %v", err)
	}
	t.Setenv("COSIGN_PASSWORD", "wrong")
	if _, err := loadKey(key); err == nil {
		t.Error("the key decrypted with a wrong password")
	}
	must(os.WriteFile(files[1], []byte("changed"), 0o644))
	if err := verifyDir([]string{"-pub", filepath.Join(keys, "cosign.pub"), "-dir", dir}); err == nil {
		t.Error("a changed file verified")
	}
}

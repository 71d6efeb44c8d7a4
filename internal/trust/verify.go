package trust

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Contents is what a trust bundle's two forms hold: the digest of the PEM
// bundle's certificates and of the PKCS#12 store's. A form that could not
// be read has an empty digest and its reason in Problem.
type Contents struct {
	PEMDigest, StoreDigest string
	Problem                string
}

// Matches reports whether both forms hold exactly the certificates of
// digest.
func (c Contents) Matches(digest string) bool {
	return digest != "" && c.PEMDigest == digest && c.StoreDigest == digest
}

// Read reads the two forms of a bundle (the values of BundleFile and
// TrustStoreFile).
func Read(pemData, store []byte) Contents {
	var c Contents
	var problems []error
	if certs, err := ParsePEM(pemData); err != nil {
		problems = append(problems, fmt.Errorf("%s: %w", BundleFile, err))
	} else {
		c.PEMDigest = Digest(certs)
	}
	if certs, err := ReadTrustStore(store, TrustStorePassword); err != nil {
		problems = append(problems, fmt.Errorf("%s: %w", TrustStoreFile, err))
	} else {
		c.StoreDigest = Digest(certs)
	}
	if err := errors.Join(problems...); err != nil {
		c.Problem = err.Error()
	}
	return c
}

// VerifyDir checks that the bundle mounted in dir (BundleFile and
// TrustStoreFile, as egret's webhook mounts its trust ConfigMap) holds
// exactly the certificates of digest: the check egret's sidecar makes at
// start, so a bundle egret did not write — or changed since the pod was
// admitted — is never trusted.
func VerifyDir(dir, digest string) error {
	read := func(name string) ([]byte, error) {
		b, err := readLimited(filepath.Join(dir, name), 2*MaxPEMBytes)
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is not mounted", filepath.Join(dir, name))
		}
		return b, err
	}
	p, err := read(BundleFile)
	if err != nil {
		return err
	}
	s, err := read(TrustStoreFile)
	if err != nil {
		return err
	}
	c := Read(p, s)
	switch {
	case c.Problem != "":
		return fmt.Errorf("trust bundle in %s: %s", dir, c.Problem)
	case !c.Matches(digest):
		return fmt.Errorf("trust bundle in %s holds certificates of digest %s (store %s), not %s, the bundle egret verified when it admitted this pod: "+
			"if egret's CA source changed since, restart the pod (egret pods --stale lists it); if not, someone replaced ConfigMap egret-trust-bundle",
			dir, short(c.PEMDigest), short(c.StoreDigest), short(digest))
	}
	return nil
}

func short(d string) string {
	if len(d) > 12 {
		return d[:12] + "…"
	}
	return d
}

package main

import (
	"crypto"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// verifyDir checks every FILE.sigstore.json in dir against FILE, and the
// provenance statement's subjects against the files they name, with
// sigstore-go's verifier and the public key: no check of our own decides.
func verifyDir(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	pubPath := fs.String("pub", "", "the public key (cosign.pub)")
	dir := fs.String("dir", "", "the release directory")
	fs.Parse(args)
	if *pubPath == "" || *dir == "" {
		return errUsage
	}
	v, err := newVerifier(*pubPath)
	if err != nil {
		return err
	}
	bundles, err := filepath.Glob(filepath.Join(*dir, "*"+BundleSuffix))
	if err != nil {
		return err
	}
	if len(bundles) == 0 {
		return fmt.Errorf("no %s files in %s", BundleSuffix, *dir)
	}
	for _, bp := range bundles {
		b, err := bundle.LoadJSONFromPath(bp)
		if err != nil {
			return fmt.Errorf("%s: %v", bp, err)
		}
		name := filepath.Base(bp)
		if env := b.GetDsseEnvelope(); env != nil {
			// A statement: every subject is a file of the release, by digest.
			res, err := v.Verify(b, verify.NewPolicy(verify.WithoutArtifactUnsafe(), verify.WithKey()))
			if err != nil {
				return fmt.Errorf("%s: %v", name, err)
			}
			if res.Statement == nil || res.Statement.GetPredicateType() != slsaProvenance {
				return fmt.Errorf("%s: not an SLSA provenance statement", name)
			}
			var digests []verify.ArtifactDigest
			for _, s := range res.Statement.GetSubject() {
				sum, err := sha256File(filepath.Join(*dir, filepath.Base(s.GetName())))
				if err != nil {
					return fmt.Errorf("%s: subject %s: %v", name, s.GetName(), err)
				}
				raw, _ := hex.DecodeString(sum)
				digests = append(digests, verify.ArtifactDigest{Algorithm: "sha256", Digest: raw})
			}
			if _, err := v.Verify(b, verify.NewPolicy(verify.WithArtifactDigests(digests), verify.WithKey())); err != nil {
				return fmt.Errorf("%s: the files do not match its subjects: %v", name, err)
			}
			fmt.Printf("verified %s: SLSA provenance of %d files\n", name, len(digests))
			continue
		}
		art := strings.TrimSuffix(bp, BundleSuffix)
		f, err := os.Open(art)
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		_, err = v.Verify(b, verify.NewPolicy(verify.WithArtifact(f), verify.WithKey()))
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		fmt.Printf("verified %s\n", filepath.Base(art))
	}
	return nil
}

func newVerifier(pubPath string) (*verify.Verifier, error) {
	b, err := os.ReadFile(pubPath)
	if err != nil {
		return nil, err
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", pubPath, err)
	}
	sv, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	want, err := hint(pub)
	if err != nil {
		return nil, err
	}
	tm := root.NewTrustedPublicKeyMaterial(func(h string) (root.TimeConstrainedVerifier, error) {
		if h != want {
			return nil, fmt.Errorf("signed with another key (hint %s, want %s)", h, want)
		}
		return root.NewExpiringKey(sv, time0, time0), nil
	})
	return verify.NewVerifier(tm, verify.WithNoObserverTimestamps())
}

var time0 time.Time

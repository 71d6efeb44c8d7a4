package trust

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"software.sslmate.com/src/go-pkcs12"
)

// Bounds on what a source may hold. A ConfigMap holds at most 1 MiB; the
// Mozilla roots are about 220 KB of PEM.
const (
	MaxPEMBytes = 768 << 10
	MaxCerts    = 1000
)

// Names of the files egret writes (the keys of its trust ConfigMap) and the
// trust store's password. The password protects nothing (the store holds
// public certificates); Java's own cacerts uses the same one.
const (
	BundleFile         = "ca-bundle.pem"
	TrustStoreFile     = "truststore.p12"
	TrustStorePassword = pkcs12.DefaultPassword
	TrustStoreType     = "PKCS12"
)

// SystemBundles are the files Go reads its system roots from on Linux, in
// its order; SystemRoots reads the first that exists.
var SystemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// ParsePEM reads the CERTIFICATE blocks of a PEM bundle. Text around blocks
// (comments, trust-manager's headers) is ignored. A private key, or any
// block that is not a certificate, is an error: a CA source must never
// carry one. So is a bundle larger than MaxPEMBytes or with more than
// MaxCerts certificates, or one without a certificate.
func ParsePEM(data []byte) ([]*x509.Certificate, error) {
	if len(data) > MaxPEMBytes {
		return nil, fmt.Errorf("bundle of %d bytes is larger than %d", len(data), MaxPEMBytes)
	}
	var out []*x509.Certificate
	rest := data
	for n := 1; ; n++ {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch {
		case strings.Contains(b.Type, "PRIVATE KEY"):
			return nil, fmt.Errorf("block %d is a %s: a CA bundle must hold certificates only", n, b.Type)
		case b.Type != "CERTIFICATE":
			return nil, fmt.Errorf("block %d is a %q block, not a CERTIFICATE", n, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n, err)
		}
		if len(out) == MaxCerts {
			return nil, fmt.Errorf("more than %d certificates", MaxCerts)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return out, nil
}

// SystemRoots reads the first of files that exists (SystemBundles when
// files is empty) and returns its certificates and path.
func SystemRoots(files ...string) ([]*x509.Certificate, string, error) {
	if len(files) == 0 {
		files = SystemBundles
	}
	for _, f := range files {
		data, err := readBounded(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, f, err
		}
		certs, err := ParsePEM(data)
		if err != nil {
			return nil, f, fmt.Errorf("system roots %s: %w", f, err)
		}
		return certs, f, nil
	}
	return nil, "", fmt.Errorf("no system CA bundle: none of %s exists", strings.Join(files, ", "))
}

func readBounded(path string) ([]byte, error) { return readLimited(path, MaxPEMBytes) }

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// Bundle is a set of CA certificates without duplicates: the system roots
// followed by the certificates of the source that are not among them.
type Bundle struct {
	Certs []*x509.Certificate
	// Added are the source's certificates that are not system roots (the
	// corporate CAs), in source order.
	Added []*x509.Certificate
}

// Build merges the system roots with the source's certificates. It refuses
// to build a bundle without system roots: a runtime whose variable replaces
// its defaults would then trust only the corporate CAs, and every endpoint
// the proxy does not intercept would fail.
func Build(system, source []*x509.Certificate) (*Bundle, error) {
	if len(system) == 0 {
		return nil, errors.New("no system roots: a bundle of the corporate CAs alone would break every endpoint that is not intercepted")
	}
	if len(source) == 0 {
		return nil, errors.New("the source holds no certificate")
	}
	b := &Bundle{}
	seen := map[string]bool{}
	for _, c := range system {
		if k := string(c.Raw); !seen[k] {
			seen[k] = true
			b.Certs = append(b.Certs, c)
		}
	}
	for _, c := range source {
		if k := string(c.Raw); !seen[k] {
			seen[k] = true
			b.Certs = append(b.Certs, c)
			b.Added = append(b.Added, c)
		}
	}
	if len(b.Certs) > MaxCerts {
		return nil, fmt.Errorf("the bundle would hold %d certificates, more than %d", len(b.Certs), MaxCerts)
	}
	return b, nil
}

// PEM writes the bundle as PEM, one block per certificate, each preceded by
// a comment naming its subject.
func (b *Bundle) PEM() []byte {
	var buf bytes.Buffer
	for _, c := range b.Certs {
		fmt.Fprintf(&buf, "# %s\n", oneLine(c.Subject.String()))
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

// Digest is a SHA-256 over the bundle's certificates in a canonical order:
// the same set gives the same digest, whatever the order or comments.
func (b *Bundle) Digest() string { return Digest(b.Certs) }

// Digest is Bundle.Digest for any certificate list.
func Digest(certs []*x509.Certificate) string {
	sums := make([]string, len(certs))
	for i, c := range certs {
		s := sha256.Sum256(c.Raw)
		sums[i] = hex.EncodeToString(s[:])
	}
	sort.Strings(sums)
	h := sha256.New()
	for _, s := range sums {
		io.WriteString(h, s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TrustStore encodes the bundle as a PKCS#12 trust store for the JVM
// (trusted-certificate entries, PBES2/AES-256 and HMAC-SHA-256 — readable
// by Java 12+, 11.0.12+ and 8u301+) with TrustStorePassword. rand nil means
// crypto/rand.
func (b *Bundle) TrustStore(rand io.Reader) ([]byte, error) {
	enc := pkcs12.Modern2023
	if rand != nil {
		enc = enc.WithRand(rand)
	}
	entries := make([]pkcs12.TrustStoreEntry, len(b.Certs))
	for i, c := range b.Certs {
		entries[i] = pkcs12.TrustStoreEntry{Cert: c, FriendlyName: fmt.Sprintf("egret-%d", i)}
	}
	p, err := enc.EncodeTrustStoreEntries(entries, TrustStorePassword)
	if err != nil {
		return nil, fmt.Errorf("encode trust store: %w", err)
	}
	return p, nil
}

// ReadTrustStore decodes a PKCS#12 trust store with password.
func ReadTrustStore(data []byte, password string) ([]*x509.Certificate, error) {
	if len(data) > 2*MaxPEMBytes {
		return nil, fmt.Errorf("trust store of %d bytes is too large", len(data))
	}
	certs, err := pkcs12.DecodeTrustStore(data, password)
	if err != nil {
		return nil, fmt.Errorf("read PKCS#12 trust store: %w", err)
	}
	return certs, nil
}

// Names returns the subjects' common names (or whole subjects) of certs,
// for messages.
func Names(certs []*x509.Certificate) []string {
	out := make([]string, len(certs))
	for i, c := range certs {
		out[i] = Name(c)
	}
	return out
}

// Name is a certificate's common name, or its subject when it has none.
func Name(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return oneLine(c.Subject.CommonName)
	}
	return oneLine(c.Subject.String())
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

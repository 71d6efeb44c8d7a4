package intercept

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"time"

	"egret.io/egret/internal/watch"
)

// The files of the CA Secret (its keys), mounted into the gateway only.
// CertFile and KeyFile are the signing CA (cert-manager's names, so a
// cert-manager Certificate with isCA can keep the Secret); TrustFile, when
// present, holds more CA certificates that pods must keep trusting during a
// rotation — the next CA before the switch, the previous one after it.
const (
	CertFile  = "tls.crt"
	KeyFile   = "tls.key"
	TrustFile = "trust.crt"
)

// maxCAFile bounds each file of the CA Secret.
const maxCAFile = 1 << 20

// Authority is the CA egret signs leaves with, and the set of CA
// certificates pods must trust. It is immutable.
type Authority struct {
	// Cert is the signing CA's certificate; Key its private key.
	Cert *x509.Certificate
	Key  crypto.Signer
	// Chain is what follows a leaf in the handshake: empty when Cert is a
	// self-signed root the clients trust directly, else Cert and the
	// intermediates of tls.crt (the root stays out).
	Chain [][]byte
	// Trusted is every CA certificate the pods' trust bundle must hold:
	// Cert first, then the certificates of trust.crt.
	Trusted []*x509.Certificate
}

// Fingerprint is the SHA-256 of the signing certificate, in hex: how logs,
// the status page and `egret policy explain` name a CA.
func (a *Authority) Fingerprint() string { return fingerprint(a.Cert) }

func fingerprint(c *x509.Certificate) string {
	s := sha256.Sum256(c.Raw)
	return hex.EncodeToString(s[:])
}

// BundlePEM is Trusted in PEM form: what the trust-bundle controller gives
// pods (beside the system roots).
func (a *Authority) BundlePEM() []byte {
	var b bytes.Buffer
	for _, c := range a.Trusted {
		fmt.Fprintf(&b, "# egret interception CA %s (sha256 %s)\n", oneLine(c.Subject.String()), fingerprint(c)[:16])
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// ParseAuthority reads the CA Secret's files: certPEM (the signing CA's
// certificate, optionally followed by its issuers), keyPEM (its key: PKCS#8,
// SEC 1 EC or PKCS#1 RSA) and trustPEM (nil or more CA certificates to keep
// trusted). It checks that the certificate is a CA that may sign
// certificates, is valid now, and matches the key. No error holds key
// material.
func ParseAuthority(certPEM, keyPEM, trustPEM []byte, now time.Time) (*Authority, error) {
	certs, err := parseCerts(certPEM, CertFile)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s holds no certificate", CertFile)
	}
	ca := certs[0]
	if !ca.IsCA || !ca.BasicConstraintsValid {
		return nil, fmt.Errorf("%s: %s is not a CA certificate (basic constraints CA:TRUE is missing)", CertFile, oneLine(ca.Subject.String()))
	}
	if ca.KeyUsage != 0 && ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%s: %s may not sign certificates (key usage lacks keyCertSign)", CertFile, oneLine(ca.Subject.String()))
	}
	if now.Before(ca.NotBefore) || !now.Before(ca.NotAfter) {
		return nil, fmt.Errorf("%s: %s is valid from %s to %s, not now", CertFile, oneLine(ca.Subject.String()),
			ca.NotBefore.UTC().Format(time.RFC3339), ca.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicKeyEqual(ca.PublicKey, key.Public()) {
		return nil, fmt.Errorf("%s does not belong to the certificate in %s", KeyFile, CertFile)
	}
	a := &Authority{Cert: ca, Key: key, Trusted: []*x509.Certificate{ca}}
	if !selfSigned(ca) {
		for _, c := range certs {
			if !selfSigned(c) {
				a.Chain = append(a.Chain, c.Raw)
			}
		}
	}
	if len(trustPEM) > 0 {
		more, err := parseCerts(trustPEM, TrustFile)
		if err != nil {
			return nil, err
		}
		for _, c := range more {
			if !c.IsCA || !c.BasicConstraintsValid {
				return nil, fmt.Errorf("%s: %s is not a CA certificate", TrustFile, oneLine(c.Subject.String()))
			}
			if !bytes.Equal(c.Raw, ca.Raw) {
				a.Trusted = append(a.Trusted, c)
			}
		}
	}
	return a, nil
}

func selfSigned(c *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, c.RawSubject) && c.CheckSignatureFrom(c) == nil
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// parseCerts reads every CERTIFICATE block; a private key in the file is
// refused (it would be copied into every pod's bundle).
func parseCerts(data []byte, file string) ([]*x509.Certificate, error) {
	if len(data) > maxCAFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", file, maxCAFile)
	}
	var out []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch {
		case b.Type == "CERTIFICATE":
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: certificate %d: %w", file, len(out)+1, err)
			}
			out = append(out, c)
		case strings.Contains(b.Type, "PRIVATE KEY"):
			return nil, fmt.Errorf("%s holds a private key; only %s may", file, KeyFile)
		}
		if len(out) > 16 {
			return nil, fmt.Errorf("%s holds more than 16 certificates", file)
		}
	}
	return out, nil
}

// parseKey reads the first private key block. Errors never quote it.
func parseKey(data []byte) (crypto.Signer, error) {
	if len(data) > maxCAFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", KeyFile, maxCAFile)
	}
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf("%s holds no PEM private key", KeyFile)
		}
		var (
			k   any
			err error
		)
		switch b.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: the %s block does not parse", KeyFile, b.Type)
		}
		switch k := k.(type) {
		case *ecdsa.PrivateKey:
			if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
				return nil, fmt.Errorf("%s: an ECDSA key on %s; use P-256 or P-384", KeyFile, k.Curve.Params().Name)
			}
			return k, nil
		case *rsa.PrivateKey:
			if k.N.BitLen() < 2048 {
				return nil, fmt.Errorf("%s: an RSA key of %d bits; use at least 2048 (or ECDSA P-256)", KeyFile, k.N.BitLen())
			}
			return k, nil
		default:
			return nil, fmt.Errorf("%s: a %T key; clients expect an ECDSA (P-256) or RSA CA", KeyFile, k)
		}
	}
}

// GenerateCA makes a self-signed ECDSA P-256 interception CA named cn,
// valid from now for lifetime, and returns its certificate and key in PEM
// (the tls.crt and tls.key of the CA Secret). permitted, when set, become
// the CA's name constraints: clients then accept its leaves only for those
// DNS domains (and their subdomains), so a stolen key cannot impersonate
// any other site (and every IP address is excluded). Without them the CA
// may sign for any name.
func GenerateCA(cn string, lifetime time.Duration, permitted []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"egret interception CA"}},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(lifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	if len(permitted) > 0 {
		// Names only: every address is excluded, so the key cannot
		// vouch for an IP literal either.
		tmpl.PermittedDNSDomainsCritical = true
		for _, d := range permitted {
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, strings.TrimPrefix(strings.TrimPrefix(d, "*"), "."))
		}
		tmpl.ExcludedIPRanges = []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// CADir keeps an Issuer's Authority in step with the files of the mounted
// CA Secret: tls.crt, tls.key and the optional trust.crt. A rotation is a
// Secret update; the kubelet swaps the files and the next leaf is signed by
// the new CA (leaves of the old one stay cached no longer).
type CADir struct {
	// Path is the directory the Secret is mounted at.
	Path string
	// Issuer receives the Authority.
	Issuer *Issuer
	// Interval is the safety-net re-read period; zero means
	// watch.DefaultInterval.
	Interval time.Duration
	// Reloaded, when set, is called after each reload attempt that found
	// new content: the new Authority, or the reason it was refused (the
	// previous Authority then stays in force).
	Reloaded func(a *Authority, err error)

	w *watch.Files
}

func (d *CADir) files() *watch.Files {
	if d.w == nil {
		trust := filepath.Join(d.Path, TrustFile)
		d.w = &watch.Files{
			Paths:    []string{filepath.Join(d.Path, CertFile), filepath.Join(d.Path, KeyFile), trust},
			Optional: []string{trust},
			Interval: d.Interval,
			Load: func(c [][]byte) error {
				a, err := ParseAuthority(c[0], c[1], c[2], time.Now())
				if err != nil {
					return err
				}
				d.Issuer.SetAuthority(a)
				if d.Reloaded != nil {
					d.Reloaded(a, nil)
				}
				return nil
			},
			Failed: func(err error) {
				if d.Reloaded != nil {
					d.Reloaded(nil, fmt.Errorf("interception CA %s: %w", d.Path, err))
				}
			},
		}
	}
	return d.w
}

// Load reads the directory once and gives the Issuer its Authority.
func (d *CADir) Load() (*Authority, error) {
	c, err := d.files().Read()
	if err != nil {
		return nil, fmt.Errorf("interception CA %s: %w", d.Path, err)
	}
	a, err := ParseAuthority(c[0], c[1], c[2], time.Now())
	if err != nil {
		return nil, fmt.Errorf("interception CA %s: %w", d.Path, err)
	}
	d.Issuer.SetAuthority(a)
	return a, nil
}

// Run re-reads the directory on change until ctx ends.
func (d *CADir) Run(ctx context.Context) error { return d.files().Run(ctx) }

func oneLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

var errNoAuthority = errors.New("no interception CA is loaded")

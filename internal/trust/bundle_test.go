package trust

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

func testCA(t testing.TB, cn string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pemOf(cs ...*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range cs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

func TestParsePEM(t *testing.T) {
	a, b := testCA(t, "A"), testCA(t, "B")
	good := append([]byte("# trust-manager bundle\n"), pemOf(a, b)...)
	certs, err := ParsePEM(good)
	if err != nil || len(certs) != 2 {
		t.Fatalf("ParsePEM = %d, %v", len(certs), err)
	}
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"empty", "no PEM certificate", nil},
		{"text-only", "no PEM certificate", []byte("hello")},
		{"private-key", "EC PRIVATE KEY", append(pemOf(a), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}})...)},
		{"other-block", `"CERTIFICATE REQUEST"`, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{1}})},
		{"bad-der", "certificate 1", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}})},
		{"too-large", "larger than", bytes.Repeat([]byte("x"), MaxPEMBytes+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParsePEM(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	sys1, sys2, corp := testCA(t, "System 1"), testCA(t, "System 2"), testCA(t, "Corp Root")
	if _, err := Build(nil, []*x509.Certificate{corp}); err == nil || !strings.Contains(err.Error(), "no system roots") {
		t.Fatalf("a corporate-only bundle was built: %v", err)
	}
	if _, err := Build([]*x509.Certificate{sys1}, nil); err == nil {
		t.Fatal("an empty source was accepted")
	}
	// A source that already holds public roots (trust-manager's
	// useDefaultCAs) adds only what is new.
	b, err := Build([]*x509.Certificate{sys1, sys2}, []*x509.Certificate{sys2, corp, corp})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Certs) != 3 || len(b.Added) != 1 || b.Added[0] != corp {
		t.Fatalf("bundle %v, added %v", Names(b.Certs), Names(b.Added))
	}
	back, err := ParsePEM(b.PEM())
	if err != nil || Digest(back) != b.Digest() {
		t.Fatalf("PEM round trip: %v", err)
	}
	// The digest ignores order.
	if Digest([]*x509.Certificate{corp, sys1, sys2}) != b.Digest() {
		t.Error("digest depends on order")
	}
	p12, err := b.TrustStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := ReadTrustStore(p12, TrustStorePassword)
	if err != nil || Digest(store) != b.Digest() {
		t.Fatalf("trust store holds %v, %v", Names(store), err)
	}
	if _, err := ReadTrustStore(p12, "wrong"); err == nil {
		t.Error("wrong password accepted")
	}
}

func FuzzParsePEM(f *testing.F) {
	a := testCA(f, "A")
	f.Add(pemOf(a))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, err := ParsePEM(data)
		if err != nil {
			if certs != nil {
				t.Fatal("certificates returned with an error")
			}
			return
		}
		if len(certs) == 0 || len(certs) > MaxCerts {
			t.Fatalf("%d certificates", len(certs))
		}
		if bytes.Contains(data, []byte("PRIVATE KEY-----")) && bytes.Contains(data, []byte("-----BEGIN")) {
			// Only allowed when the key block is not a complete PEM block.
			for rest := data; ; {
				var b *pem.Block
				if b, rest = pem.Decode(rest); b == nil {
					break
				}
				if strings.Contains(b.Type, "PRIVATE KEY") {
					t.Fatal("a private key block was accepted")
				}
			}
		}
	})
}

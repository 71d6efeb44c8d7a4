package intercept

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil/secretvol"
	"egret.io/egret/internal/testutil/tlslab"
)

func newAuthority(t testing.TB, cn string, permitted ...string) (*Authority, []byte, []byte) {
	t.Helper()
	c, k, err := GenerateCA(cn, 48*time.Hour, permitted)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ParseAuthority(c, k, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return a, c, k
}

func verifyLeaf(t testing.TB, cert *tls.Certificate, root *x509.Certificate, name string) error {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(root)
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		inter.AddCert(c)
	}
	_, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, Intermediates: inter, CurrentTime: cert.Leaf.NotBefore.Add(2 * leafBackdate)})
	return err
}

func TestIssuerLeaf(t *testing.T) {
	a, _, _ := newAuthority(t, "test CA")
	now := time.Now()
	is := &Issuer{Now: func() time.Time { return now }}
	is.SetAuthority(a)
	for _, name := range []string{"api.example.com", "10.1.2.3", "2001:db8::1"} {
		n, err := LeafName(name, "")
		if err != nil {
			t.Fatal(err)
		}
		c, err := is.Certificate(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := verifyLeaf(t, c, a.Cert, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		k, ok := c.PrivateKey.(*ecdsa.PrivateKey)
		if !ok || k.Curve != elliptic.P256() {
			t.Errorf("%s: key %T", name, c.PrivateKey)
		}
		if life := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore); life > DefaultLeafLifetime+leafBackdate {
			t.Errorf("%s: lifetime %v", name, life)
		}
		if len(c.Certificate) != 1 {
			t.Errorf("%s: chain of %d for a root CA (the root stays out)", name, len(c.Certificate))
		}
		if c.Leaf.IsCA || len(c.Leaf.ExtKeyUsage) != 1 || c.Leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
			t.Errorf("%s: leaf usage %v CA=%v", name, c.Leaf.ExtKeyUsage, c.Leaf.IsCA)
		}
	}
}

// TestIssuerCache: a repeat name costs no signature; renewal, rotation and
// the bound each take leaves out.
func TestIssuerCache(t *testing.T) {
	a, _, _ := newAuthority(t, "test CA")
	now := time.Now()
	is := &Issuer{CacheSize: 3, Now: func() time.Time { return now }}
	is.SetAuthority(a)
	leafFor := func(h string) *tls.Certificate {
		c, err := is.Certificate(Name{DNS: h})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := leafFor("a.example")
	if leafFor("a.example") != first || is.Stats().Signed != 1 || is.Stats().Hits != 1 {
		t.Fatalf("repeat: %+v", is.Stats())
	}
	leafFor("b.example")
	leafFor("c.example")
	leafFor("d.example") // a.example is out
	if st := is.Stats(); st.Cached != 3 {
		t.Errorf("cached %d, want the bound 3", st.Cached)
	}
	if leafFor("a.example") == first {
		t.Error("a.example survived the bound")
	}
	// Renewal: two thirds into the leaf's life it is replaced.
	cur := leafFor("a.example")
	now = now.Add(DefaultLeafLifetime * 2 / 3)
	if leafFor("a.example") == cur {
		t.Error("a leaf due for renewal was served")
	}
	// Rotation: the new CA signs at once.
	b, _, _ := newAuthority(t, "next CA")
	is.SetAuthority(b)
	c := leafFor("a.example")
	if err := verifyLeaf(t, c, b.Cert, "a.example"); err != nil {
		t.Errorf("after rotation: %v", err)
	}
}

func TestIssuerConcurrentOneSignature(t *testing.T) {
	a, _, _ := newAuthority(t, "test CA")
	is := &Issuer{}
	is.SetAuthority(a)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if _, err := is.Certificate(Name{DNS: "same.example"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st := is.Stats(); st.Signed != 1 {
		t.Errorf("signed %d leaves for one name", st.Signed)
	}
}

// TestIssuerNameConstraints: a CA limited to some domains refuses the rest
// with a clear error, and its leaves for the permitted ones verify.
func TestIssuerNameConstraints(t *testing.T) {
	a, _, _ := newAuthority(t, "constrained CA", "example.com", "api.openai.test")
	is := &Issuer{}
	is.SetAuthority(a)
	for name, ok := range map[string]bool{
		"example.com": true, "api.example.com": true, "api.openai.test": true,
		"bank.test": false, "notexample.com": false, "10.0.0.1": false,
	} {
		n, _ := LeafName(name, "")
		c, err := is.Certificate(n)
		if ok != (err == nil) {
			t.Errorf("%s: err %v", name, err)
			continue
		}
		if ok {
			if err := verifyLeaf(t, c, a.Cert, name); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		} else if !strings.Contains(err.Error(), "name constraints") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestParseAuthority(t *testing.T) {
	good, goodKey, err := GenerateCA("good", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, otherKey, _ := GenerateCA("other", time.Hour, nil)
	leafA, _, _ := newAuthority(t, "x")
	is := &Issuer{}
	is.SetAuthority(leafA)
	lc, _ := is.Certificate(Name{DNS: "leaf.example"})
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: lc.Certificate[0]})
	for _, tc := range []struct {
		name             string
		cert, key, trust []byte
		now              time.Time
		wantErr          string
		wantTrusted      int
	}{
		{"ok", good, goodKey, nil, time.Now(), "", 1},
		{"with-trust", good, goodKey, other, time.Now(), "", 2},
		{"trust-repeats-self", good, goodKey, good, time.Now(), "", 1},
		{"key-mismatch", good, otherKey, nil, time.Now(), "does not belong", 0},
		{"no-cert", nil, goodKey, nil, time.Now(), "no certificate", 0},
		{"no-key", good, nil, nil, time.Now(), "no PEM private key", 0},
		{"leaf-not-ca", leafPEM, goodKey, nil, time.Now(), "not a CA", 0},
		{"key-in-trust", good, goodKey, append(append([]byte{}, other...), otherKey...), time.Now(), "private key", 0},
		{"key-in-cert", append(append([]byte{}, good...), goodKey...), goodKey, nil, time.Now(), "private key", 0},
		{"expired", good, goodKey, nil, time.Now().Add(2 * time.Hour), "not now", 0},
		{"leaf-in-trust", good, goodKey, leafPEM, time.Now(), "not a CA", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseAuthority(tc.cert, tc.key, tc.trust, tc.now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "PRIVATE KEY-----\n") || strings.Contains(err.Error(), string(goodKey[30:60])) {
					t.Errorf("the error quotes key material: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Trusted) != tc.wantTrusted {
				t.Errorf("trusted %d, want %d", len(a.Trusted), tc.wantTrusted)
			}
			if b := a.BundlePEM(); strings.Contains(string(b), "PRIVATE") || strings.Count(string(b), "BEGIN CERTIFICATE") != tc.wantTrusted {
				t.Errorf("bundle %s", b)
			}
		})
	}
}

// TestIntermediateChain: a signing CA that is an intermediate (under a
// corporate root the pods trust) sends itself after the leaf.
func TestIntermediateChain(t *testing.T) {
	root := tlslab.NewCA(t, "corporate root") // no path length limit
	key, _ := ecdsa.GenerateKey(elliptic.P256(), randReader())
	tmpl := &x509.Certificate{SerialNumber: bigOne(), Subject: pkixName("egret intermediate"), NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(randReader(), tmpl, root.Cert, &key.PublicKey, root.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certPEM := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Cert.Raw})...)
	a, err := ParseAuthority(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	is := &Issuer{}
	is.SetAuthority(a)
	c, err := is.Certificate(Name{DNS: "api.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Certificate) != 2 {
		t.Fatalf("chain of %d, want leaf and intermediate", len(c.Certificate))
	}
	if err := verifyLeaf(t, c, root.Cert, "api.example.com"); err != nil {
		t.Error(err)
	}
}

// TestCADirRotation rotates the CA Secret the way the kubelet does, with
// the overlap: first the next CA joins trust.crt, then it signs and the
// previous one stays trusted.
func TestCADirRotation(t *testing.T) {
	_, c1, k1 := newAuthority(t, "CA one")
	_, c2, k2 := newAuthority(t, "CA two")
	vol := secretvol.New(t, map[string]string{CertFile: string(c1), KeyFile: string(k1)})
	is := &Issuer{}
	var mu sync.Mutex
	var errs []error
	d := &CADir{Path: vol.Dir, Issuer: is, Interval: 50 * time.Millisecond, Reloaded: func(_ *Authority, err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}}
	if _, err := d.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithCancel()
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	wait := func(what string, ok func(a *Authority) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !ok(is.Authority()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not reached", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	vol.Update(t, map[string]string{CertFile: string(c1), KeyFile: string(k1), TrustFile: string(c2)})
	wait("next CA trusted", func(a *Authority) bool { return len(a.Trusted) == 2 && a.Cert.Subject.CommonName == "CA one" })
	vol.Update(t, map[string]string{CertFile: string(c2), KeyFile: string(k2), TrustFile: string(c1)})
	wait("switch", func(a *Authority) bool { return a.Cert.Subject.CommonName == "CA two" && len(a.Trusted) == 2 })
	// A broken update is refused; CA two stays.
	vol.Update(t, map[string]string{CertFile: string(c2), KeyFile: string(k1)})
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(errs)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the broken update was not reported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if is.Authority().Cert.Subject.CommonName != "CA two" {
		t.Error("a broken update replaced the CA")
	}
	mu.Lock()
	msg := fmt.Sprint(errs)
	mu.Unlock()
	if !strings.Contains(msg, "does not belong") || strings.Contains(msg, string(k1[40:70])) {
		t.Errorf("errors %s", msg)
	}
}

func TestLeafName(t *testing.T) {
	for _, tc := range []struct {
		host, sni, want, err string
	}{
		{"api.example.com", "", "api.example.com", ""},
		{"api.example.com", "API.Example.COM.", "api.example.com", ""},
		{"API.example.com.", "api.example.com", "api.example.com", ""},
		{"api.example.com", "other.example.com", "", "differs"},
		{"10.0.0.1", "", "10.0.0.1", ""},
		{"10.0.0.1", "10.0.0.1", "10.0.0.1", ""},
		{"10.0.0.1", "api.example.com", "", "differs"},
		{"::1", "", "::1", ""},
		{"fe80::1%eth0", "", "", "zone"},
		{"*.example.com", "", "", "wildcard"},
		{"api.example.com", "*.example.com", "", "wildcard"},
		{"a..b", "", "", "empty label"},
		{"-a.b", "", "", "'-'"},
		{"a b.c", "", "", "character"},
		{"a\x00.c", "", "", "character"},
		{"1.2.3", "", "", "neither"},
		{"0x7f.1", "", "", "neither"},
		{"", "", "", "empty"},
		{strings.Repeat("a", 64) + ".com", "", "", "longer than 63"},
		{strings.Repeat("a.", 127) + "com", "", "", "not a DNS name"},
		{"under_score.example.com", "", "under_score.example.com", ""},
	} {
		n, err := LeafName(tc.host, tc.sni)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("LeafName(%q, %q) = %v, %v; want error %q", tc.host, tc.sni, n, err, tc.err)
			}
			continue
		}
		if err != nil || n.String() != tc.want {
			t.Errorf("LeafName(%q, %q) = %v, %v; want %s", tc.host, tc.sni, n, err, tc.want)
		}
	}
}

// FuzzLeafName: whatever a client sends as CONNECT host and SNI, a name
// is either refused or one a leaf can be issued for, that verifies for that
// name, that the CONNECT host and the SNI both denote, and that is never a
// wildcard.
func FuzzLeafName(f *testing.F) {
	for _, s := range [][2]string{{"api.example.com", ""}, {"api.example.com", "API.example.com."}, {"10.0.0.1", ""},
		{"::ffff:1.2.3.4", ""}, {"*.a.b", ""}, {"a.b", "c.d"}, {"xn--bcher-kva.example", ""}, {"1.2.3", ""}} {
		f.Add(s[0], s[1])
	}
	a, _, _ := newAuthority(f, "fuzz CA")
	is := &Issuer{CacheSize: 64}
	is.SetAuthority(a)
	f.Fuzz(func(t *testing.T, host, sni string) {
		n, err := LeafName(host, sni)
		if err != nil {
			return
		}
		s := n.String()
		if strings.Contains(s, "*") || s == "" {
			t.Fatalf("name %q", s)
		}
		if n.IP.IsValid() == (n.DNS != "") {
			t.Fatalf("name %#v is both or neither", n)
		}
		if !strings.EqualFold(strings.TrimSuffix(host, "."), s) && !n.IP.IsValid() {
			t.Fatalf("CONNECT %q gave %q", host, s)
		}
		if sni != "" && !n.IP.IsValid() && !strings.EqualFold(strings.TrimSuffix(sni, "."), s) {
			t.Fatalf("SNI %q gave %q", sni, s)
		}
		c, err := is.Certificate(n)
		if err != nil {
			t.Fatalf("%q accepted but not issued: %v", s, err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(a.Cert)
		if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: s, Roots: pool}); err != nil {
			t.Fatalf("leaf for %q does not verify: %v", s, err)
		}
	})
}

func BenchmarkIssuer(b *testing.B) {
	a, _, _ := newAuthority(b, "bench CA")
	b.Run("cached", func(b *testing.B) {
		is := &Issuer{}
		is.SetAuthority(a)
		n := Name{DNS: "api.example.com"}
		if _, err := is.Certificate(n); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := is.Certificate(n); err != nil {
				b.Fatal(err)
			}
		}
		if st := is.Stats(); st.Signed != 1 {
			b.Fatalf("signed %d", st.Signed)
		}
	})
	b.Run("new-name", func(b *testing.B) {
		is := &Issuer{CacheSize: 1 << 20}
		is.SetAuthority(a)
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			i++
			if _, err := is.Certificate(Name{DNS: fmt.Sprintf("h%d.example.com", i)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

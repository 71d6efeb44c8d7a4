// Package tlslab gives tests the parts to check, with the real runtimes,
// whom a TLS client trusts: test CAs, https origins on addresses the test
// chooses with certificates for any name, the real clients (curl, openssl,
// Go, Python requests and urllib, Node.js, Java, Ruby, git, botocore) as
// commands that print "ok STATUS" or "fail REASON", and a private mount
// namespace in which /etc/hosts, the system CA directory and certifi's
// bundle are the test's own — so a "public" origin signed by a test
// "system root" exists, and nothing outside the test's processes changes.
//
// Imported only by tests.
package tlslab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

var serial atomic.Int64

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a CA whose common name is cn, valid for a day around now.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano() + serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"egret test"}},
		NotBefore:    time.Now().Add(-12 * time.Hour), NotAfter: time.Now().Add(12 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: c, Key: key}
}

// PEM is the CA certificate in PEM form.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Leaf issues a server certificate for names (DNS names or IP literals).
func (ca *CA) Leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano() + serial.Add(1)),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if a, err := netip.ParseAddr(n); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(a.AsSlice()))
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key}
}

// S3ListBuckets is what the origin answers to GET / (botocore's
// list_buckets is path-style GET /).
const S3ListBuckets = `<?xml version="1.0" encoding="UTF-8"?>` +
	`<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner><ID>egret</ID></Owner><Buckets></Buckets></ListAllMyBucketsResult>`

// gitRefs is the smart-HTTP advertisement of an empty repository.
func gitRefs() string {
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	return pkt("# service=git-upload-pack\n") + "0000" +
		pkt("0000000000000000000000000000000000000000 capabilities^{}\x00agent=git/egret-test\n") + "0000"
}

// Handler answers every client of the lab: an empty S3 bucket list on /,
// an empty git repository on /repo.git, "ok" elsewhere. Every response
// closes its connection, so each request is a new TLS handshake.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		switch {
		case r.URL.Path == "/repo.git/info/refs":
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			fmt.Fprint(w, gitRefs())
		case r.URL.Path == "/":
			w.Header().Set("Content-Type", "application/xml")
			fmt.Fprint(w, S3ListBuckets)
		default:
			fmt.Fprint(w, "ok\n")
		}
	})
}

// Serve serves Handler over TLS with cert on ln until the test ends, and
// returns ln's port.
func Serve(t testing.TB, ln net.Listener, cert tls.Certificate) int {
	t.Helper()
	srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:  nil}
	// Failed handshakes are the point of these tests: keep them out of the log.
	srv.ErrorLog = discardLog()
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// Origin listens on ip:0 and serves Handler with a certificate for names
// issued by ca; it returns the port.
func Origin(t testing.TB, ip string, ca *CA, names ...string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	return Serve(t, ln, ca.Leaf(t, names...))
}

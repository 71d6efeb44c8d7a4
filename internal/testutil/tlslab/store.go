package tlslab

import (
	"crypto/x509"
	"io"
	"log"
	"testing"

	"software.sslmate.com/src/go-pkcs12"
)

// javaStore is a PKCS#12 store of cas to stand in for the JDK's cacerts,
// which the JVM opens without a password: certificates unencrypted, no MAC.
func javaStore(t testing.TB, cas []*CA) []byte {
	t.Helper()
	certs := make([]*x509.Certificate, len(cas))
	for i, ca := range cas {
		certs[i] = ca.Cert
	}
	p, err := pkcs12.Passwordless.EncodeTrustStore(certs, "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

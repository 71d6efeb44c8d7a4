package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"egret.io/egret/internal/intercept"
)

// tlsLab is what the intercept tests need: a TLS origin on the origin's
// address with a certificate from a bench "public" CA the proxies are told
// to trust, an interception CA the proxies sign their leaves with (and the
// clients trust), and the token the proxy injects.
type tlsLab struct {
	origin     *origin
	originCA   string // PEM file of the origin's CA
	caDir      string // tls.crt and tls.key of the interception CA
	token      string // file with the injected bearer token
	intercept  *x509.CertPool
	originPool *x509.CertPool
	host       string // the origin's address, as an IP literal: no name to resolve
}

func newTLSLab(dir, listen string) (*tlsLab, error) {
	l := &tlsLab{caDir: filepath.Join(dir, "intercept-ca"), originCA: filepath.Join(dir, "origin-ca.pem"), token: filepath.Join(dir, "token")}
	if err := os.MkdirAll(l.caDir, 0o755); err != nil {
		return nil, err
	}
	ocert, okey, err := intercept.GenerateCA("egret bench origin root", 24*time.Hour, nil)
	if err != nil {
		return nil, err
	}
	oa, err := intercept.ParseAuthority(ocert, okey, nil, time.Now())
	if err != nil {
		return nil, err
	}
	icert, ikey, err := intercept.GenerateCA("egret bench interception CA", 24*time.Hour, nil)
	if err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{l.originCA: ocert, filepath.Join(l.caDir, intercept.CertFile): icert,
		filepath.Join(l.caDir, intercept.KeyFile): ikey, l.token: []byte("bench-injected-token\n")} {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return nil, err
		}
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("-origin %q: %w", listen, err)
	}
	n, err := intercept.LeafName(host, "")
	if err != nil {
		return nil, fmt.Errorf("-origin %q: %w", listen, err)
	}
	is := &intercept.Issuer{}
	is.SetAuthority(oa)
	leaf, err := is.Certificate(n)
	if err != nil {
		return nil, err
	}
	if l.origin, err = startTLSOrigin(net.JoinHostPort(host, "0"), *leaf); err != nil {
		return nil, err
	}
	l.host = host
	l.intercept, l.originPool = x509.NewCertPool(), x509.NewCertPool()
	l.intercept.AppendCertsFromPEM(icert)
	l.originPool.AppendCertsFromPEM(ocert)
	return l, nil
}

// target is where an intercept test goes through p: the TLS origin.
func (l *tlsLab) target(p *peer) target { return target{Proxy: p.URL, Host: l.origin.Addr} }

// clientConfig is the clients' TLS: they trust the interception CA (the
// origin's own CA for direct), resume no session (every connection is a
// full handshake), speak HTTP/1.1 (what every proxy measured serves to
// clients) and agree X25519 (what every proxy measured offers; Go's default
// hybrid post-quantum key exchange would cost the Go proxies more than the
// OpenSSL 3.0 ones, which lack it).
func (l *tlsLab) clientConfig(p *peer) *tls.Config {
	pool := l.intercept
	if p.Name == pDirect {
		pool = l.originPool
	}
	return &tls.Config{RootCAs: pool, ServerName: l.host, NextProtos: []string{"http/1.1"},
		CurvePreferences: []tls.CurveID{tls.X25519}, MinVersion: tls.VersionTLS12}
}

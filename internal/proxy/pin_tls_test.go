package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"

	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/proxytest"
)

// connectMember is an upstream that opens every CONNECT to to, whatever
// the target, and relays.
func connectMember(t *testing.T, to string) string {
	t.Helper()
	port := proxytest.TCPOrigin(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil || req.Method != http.MethodConnect {
			return
		}
		o, err := net.Dial("tcp", to)
		if err != nil {
			io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
			return
		}
		defer o.Close()
		io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
		go io.Copy(o, br)
		io.Copy(c, o)
	})
	return "127.0.0.1:" + port
}

// TestPinnedTLSNotSharedAcrossNames: two names that resolve to one
// approved address reach it through a member's tunnel to the address; the
// https connection egret verified for the first name is never reused for
// the second, whose certificate must be verified on its own (the origin's
// holds only the first name: the second request fails verification).
func TestPinnedTLSNotSharedAcrossNames(t *testing.T) {
	cert, _ := testutil.SelfSigned(t, "", "a.test")
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	oport := tlsOrigin(t, cert)
	member := connectMember(t, "127.0.0.1:"+oport)
	p := startProxyWith(t, proxyConf{
		def:     route.Direct,
		members: []string{"http://" + member},
		hosts:   map[string]string{"a.test": "10.9.0.7", "b.test": "10.9.0.7"},
		rules:   []route.Rule{{Match: route.Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}, Action: route.Upstream, Source: "test ranges"}},
	}, func(o *Options) { o.OriginTLS = &tls.Config{RootCAs: roots} })
	c := dialRaw(t, p.Addr)
	c.Send("GET https://a.test:%s/ HTTP/1.1\r\nHost: a.test\r\n\r\n", oport)
	if resp, body := c.Read("GET a"); resp.StatusCode != 200 {
		t.Fatalf("a.test: %d %q", resp.StatusCode, body)
	}
	c.Send("GET https://b.test:%s/ HTTP/1.1\r\nHost: b.test\r\n\r\n", oport)
	if resp, body := c.Read("GET b"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("b.test, whose certificate the origin does not hold: %d %q (a's verified connection reused?)", resp.StatusCode, body)
	}
}

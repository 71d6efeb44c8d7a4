package intercept

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkInterceptedConnection: one CONNECT, a full TLS handshake with
// egret's leaf, one GET (with a credential injected and the rules judged)
// that egret sends on over its own TLS connection to the origin, close —
// the client, the front, the engine and the origin all in this process.
func BenchmarkInterceptedConnection(b *testing.B) {
	l := newLab(b)
	l.origin("api.example.test", nil, nil)
	site, _ := apiSite(b, "api.example.test", RulesSpec{Rules: []RuleSpec{{Action: "allow", Methods: []string{"GET"}, PathPrefixes: []string{"/"}}}})
	l.setSites(site)
	l.engine.Log = nil
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(l.caCert)
	cfg := &tls.Config{ServerName: "api.example.test", RootCAs: pool, NextProtos: []string{"http/1.1"}, CurvePreferences: []tls.CurveID{tls.X25519}}
	p := port(l, "api.example.test")
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", l.front)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT api.example.test:%s HTTP/1.1\r\nHost: x\r\n\r\n", p)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(resp, err)
		}
		tc := tls.Client(c, cfg)
		fmt.Fprintf(tc, "GET /v1/x HTTP/1.1\r\nHost: api.example.test:%s\r\nConnection: close\r\n\r\n", p)
		resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		tc.Close()
	}
	st := l.engine.Stats()
	b.ReportMetric(float64(st.Resumed)/float64(max(st.OriginHandshakes, 1)), "resumed/origin-handshake")
}

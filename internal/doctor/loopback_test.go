package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/echo"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
)

// hostsResolver answers from a map, NXDOMAIN otherwise: nothing reaches
// real DNS.
type hostsResolver map[string]string

func (h hostsResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[strings.TrimSuffix(host, ".")]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestHTTPSEchoThroughEgretOnLoopback runs unprivileged, on loopback only:
// an https egret echo server reached through a real egret proxy with
// CONNECT then TLS, and directly. Both leave from 127.0.0.1, which the
// doctor reports as a warning (no separate egress IP); a certificate the
// pod does not trust is a TLS failure, not a crash.
func TestHTTPSEchoThroughEgretOnLoopback(t *testing.T) {
	es := httptest.NewTLSServer(echo.Handler())
	t.Cleanup(es.Close)
	_, echoPort, _ := net.SplitHostPort(es.Listener.Addr().String())

	tbl, err := route.New(nil, route.Direct, "")
	if err != nil {
		t.Fatal(err)
	}
	res := resolve.New(resolve.Config{Hosts: map[string][]netip.Addr{"example.com": {netip.MustParseAddr("127.0.0.1")}}},
		hostsResolver{}.LookupNetIP)
	ps, err := proxy.New(proxy.Options{Via: "egret-test", Resolver: res}, &proxy.State{Routes: tbl})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ps.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ps.Shutdown(ctx)
	})

	pool := x509.NewCertPool()
	pool.AddCert(es.Certificate())
	dir := t.TempDir()
	rc := filepath.Join(dir, "resolv.conf")
	os.WriteFile(rc, []byte(resolvText), 0o644)
	env := []string{"HTTPS_PROXY=http://" + ln.Addr().String(), "https_proxy=http://" + ln.Addr().String(), "NO_PROXY=" + fullNoProxy, "no_proxy=" + fullNoProxy}
	deps := func(tc *tls.Config) Deps {
		return Deps{Environ: env, PID1Environ: filepath.Join(dir, "none"), ResolvConf: rc,
			Resolver: hostsResolver{"example.com": "127.0.0.1", "kubernetes.default.svc.cluster.local": "127.0.0.1"},
			LookPath: func(string) (string, error) { return "", os.ErrNotExist }, TLSConfig: tc}
	}
	o := Options{Echo: "https://example.com:" + echoPort + "/", Internal: []string{"kubernetes.default.svc:" + echoPort}, Timeout: 3 * time.Second}

	t.Run("trusted-certificate", func(t *testing.T) {
		outs, err := Run(context.Background(), o, deps(&tls.Config{RootCAs: pool}))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := find(outs, "proxy")
		if p.Status != Pass || !strings.Contains(p.Summary, "200") {
			t.Errorf("proxy: %s %s", p.Status, p.Summary)
		}
		e, _ := find(outs, "egress-ip")
		if e.Status != Warn || !strings.Contains(e.Summary, "both leave from 127.0.0.1") {
			t.Errorf("egress-ip: %s %s %q", e.Status, e.Summary, e.Details)
		}
		d, _ := find(outs, "direct")
		if d.Status != Pass {
			t.Errorf("direct: %s %s", d.Status, d.Summary)
		}
	})
	t.Run("untrusted-certificate", func(t *testing.T) {
		outs, err := Run(context.Background(), o, deps(&tls.Config{RootCAs: x509.NewCertPool()}))
		if err != nil {
			t.Fatal(err)
		}
		e, _ := find(outs, "egress-ip")
		if e.Status != Fail || !strings.Contains(e.Summary, "the proxy opened the tunnel, but TLS with example.com") ||
			!strings.Contains(e.Summary, "certificate") || !strings.Contains(e.Advice, "trust store") {
			t.Errorf("egress-ip: %s %s %q", e.Status, e.Summary, e.Details)
		}
	})
}

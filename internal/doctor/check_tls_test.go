package doctor

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil/tlslab"
	"egret.io/egret/internal/trust"
)

// connectProxy tunnels every CONNECT to its target (loopback only).
func connectProxy(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil || req.Method != http.MethodConnect {
					return
				}
				up, err := net.DialTimeout("tcp", req.Host, 5*time.Second)
				if err != nil {
					fmt.Fprint(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
					return
				}
				defer up.Close()
				fmt.Fprint(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				go func() { _, _ = io.Copy(up, br) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestTLSCheckThroughInterceptingProxy(t *testing.T) {
	corp := tlslab.NewCA(t, "Corp TLS Inspection CA")
	port := tlslab.Origin(t, "127.0.0.1", corp, "127.0.0.1")
	proxy := connectProxy(t)
	sys, _, err := trust.SystemRoots()
	if err != nil {
		t.Skipf("no system CA bundle here: %v", err)
	}
	b, err := trust.Build(sys, []*x509.Certificate{corp.Cert})
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), trust.BundleFile)
	if err := os.WriteFile(bundle, b.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	target := fmt.Sprintf("https://127.0.0.1:%d/", port)
	onPath := func(exe string) (string, error) {
		if exe == "python3" {
			return "/usr/bin/python3", nil
		}
		return "", os.ErrNotExist
	}
	run := func(env ...string) Outcome {
		t.Helper()
		checks, err := Checks(Options{TLS: []string{target}, Timeout: 5 * time.Second},
			Deps{Environ: append([]string{"HTTPS_PROXY=http://" + proxy}, env...), LookPath: onPath,
				ResolvConf: "/dev/null", PID1Environ: "/dev/null", Resolver: nxResolver{}})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range RunChecks(context.Background(), checks, 30*time.Second) {
			if o.Name == "tls" {
				return o
			}
		}
		t.Fatal("no tls check")
		return Outcome{}
	}
	t.Run("requests-lacks-the-ca", func(t *testing.T) {
		o := run("SSL_CERT_FILE=" + bundle)
		text := o.Summary + "\n" + strings.Join(o.Details, "\n") + "\n" + o.Advice
		for _, want := range []string{"intercepted by Corp TLS Inspection CA", "python-requests will not trust it", "go: trusts it", "REQUESTS_CA_BUNDLE"} {
			if !strings.Contains(text, want) {
				t.Errorf("report lacks %q:\n%s", want, text)
			}
		}
		if o.Status != Fail {
			t.Errorf("status %s", o.Status)
		}
	})
	t.Run("every-runtime-has-the-ca", func(t *testing.T) {
		o := run("SSL_CERT_FILE="+bundle, "REQUESTS_CA_BUNDLE="+bundle)
		if o.Status != Pass || !strings.Contains(o.Summary, "go, python-requests and python-ssl trust it") {
			t.Errorf("%s: %s\n%s", o.Status, o.Summary, strings.Join(o.Details, "\n"))
		}
	})
	t.Run("no-ca-at-all", func(t *testing.T) {
		o := run()
		if o.Status != Fail || !strings.Contains(o.Summary, "go, python-requests and python-ssl will not trust it") {
			t.Errorf("%s: %s", o.Status, o.Summary)
		}
	})
}

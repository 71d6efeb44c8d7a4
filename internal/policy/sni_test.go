package policy_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/testutil"
)

// tlsOrigin serves HTTPS on ip:443 (the SNI check is for TLS ports) with a
// certificate for names, answering "hello from <SNI>", and returns the CA
// file and pool for the clients.
func tlsOrigin(t *testing.T, ip string, names ...string) (string, *x509.CertPool) {
	t.Helper()
	testutil.NeedRoot(t) // port 443
	cert, caFile := testutil.SelfSigned(t, "", names...)
	ln, err := tls.Listen("tcp", net.JoinHostPort(ip, "443"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.TLS.ServerName)
	}), ErrorLog: log.New(io.Discard, "", 0)} // refused handshakes are the test
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return caFile, pool
}

// TestSNICheck: a CONNECT tunnel to a TLS port whose ClientHello names
// another host than the CONNECT target (domain fronting) is refused under
// sni: enforce and logged as would_deny under sni: report; a real TLS
// client (curl, and Go's crypto/tls) whose server name is the target gets
// through either way.
func TestSNICheck(t *testing.T) {
	const originIP = "127.77.0.1"
	caFile, roots := tlsOrigin(t, originIP, "tls.test", "front.test")
	curl := testutil.NeedTool(t, "curl")
	names := hosts{"tls.test": originIP, "front.test": originIP}
	pods := identity.NewPods()
	eng := &policy.Engine{Pods: pods}
	g := startGateway(t, eng, names, nil)
	pod := func(ns, ip string) {
		pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", UID: types.UID("uid-" + ns)},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}})
	}
	set := func(ns, mode string) {
		var p policy.EgressPolicy
		if err := yaml.UnmarshalStrict([]byte(fmt.Sprintf(`
metadata: {name: tls, namespace: %s}
spec:
  sni: %s
  egress:
  - {action: allow, hosts: [tls.test, front.test], ports: [443]}`, ns, mode)), &p); err != nil {
			t.Fatal(err)
		}
		if c := eng.Set(&p, false); c.Err != nil {
			t.Fatal(c.Err)
		}
	}
	const enforcing, reporting = "127.0.4.1", "127.0.4.2"
	pod("enforcing", enforcing)
	set("enforcing", policy.SNIEnforce.String())
	pod("reporting", reporting)
	set("reporting", policy.SNIReport.String())

	// goTLS opens a tunnel to target from src and speaks TLS with the
	// server name sni; it returns the origin's answer or the error.
	goTLS := func(src, target, sni string) (string, error) {
		c, err := dialFrom(src, g.http)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %v %v", target, resp, err)
		}
		tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: sni, RootCAs: roots})
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
		resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	// viaCurl asks curl for https://url through the gateway from src;
	// connectTo, when set, is curl's --connect-to (the tunnel goes there,
	// the server name stays the URL's).
	viaCurl := func(src, url, connectTo string) (string, error) {
		args := []string{"-sS", "--max-time", "10", "--cacert", caFile, "--proxy", "http://" + g.http, "--interface", src, url}
		if connectTo != "" {
			args = append(args, "--connect-to", connectTo)
		}
		out, err := exec.Command(curl, args...).CombinedOutput()
		return string(out), err
	}

	for _, tc := range []struct {
		name, src, target, sni string
		through                bool
		fields                 map[string]string
	}{
		{"enforce-same-name", enforcing, "tls.test:443", "tls.test", true, map[string]string{"sni": "tls.test", "error": "", "would_deny": ""}},
		{"enforce-fronted", enforcing, "tls.test:443", "front.test", false, map[string]string{"sni": "front.test", "error": "http_request_denied"}},
		{"report-fronted", reporting, "tls.test:443", "front.test", true, map[string]string{"sni": "front.test", "error": "",
			"would_deny": "sni TLS server name front.test is not the CONNECT target tls.test (reporting/tls)"}},
	} {
		for _, client := range []string{"go", "curl"} {
			t.Run(tc.name+"/"+client, func(t *testing.T) {
				off := g.log.Len()
				var body string
				var err error
				if client == "go" {
					body, err = goTLS(tc.src, tc.target, tc.sni)
				} else {
					connectTo := ""
					if host := strings.Split(tc.target, ":")[0]; host != tc.sni {
						connectTo = tc.sni + ":443:" + host + ":443"
					}
					body, err = viaCurl(tc.src, "https://"+tc.sni+"/", connectTo)
				}
				if got := body == "hello from "+tc.sni; got != tc.through {
					t.Errorf("through = %v (%q, %v), want %v", got, body, err, tc.through)
				}
				line := g.line(t, off, "connect", "tls.test")
				wantFields(t, line, tc.fields)
				if line["dest"] != tc.target {
					t.Errorf("dest %v, want the CONNECT target %s", line["dest"], tc.target)
				}
			})
		}
	}
}

// bufferedConn reads what a bufio.Reader already holds first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

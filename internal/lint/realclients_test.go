package lint

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// These tests check, with the real clients, the claims two rules make: the
// finding appears on the manifest, and the client started with that
// container's environment really does what the message says. Traffic stays
// on loopback: a fake proxy and an origin server, both on ephemeral ports.

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("EGRET_REQUIRE_ALL") == "1" {
			t.Fatalf("%s not installed (scripts/deps installs it)", name)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

// fakeProxy answers every request with "via-proxy" and counts them.
func fakeProxy(t *testing.T) (addr string, hits func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := make(chan int, 1)
	n <- 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				n <- (<-n) + 1
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nvia-proxy")
			}(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), func() int { v := <-n; n <- v; return v }
}

// originServer serves "direct" on ip (a loopback address).
func originServer(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "direct") }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// containerEnv returns the environment CheckPod sees for the first
// container, with every proxy URL pointed at proxyAddr.
func containerEnv(spec *corev1.PodSpec, proxyAddr string) []string {
	p := newPod(PodInput{Object: ObjectRef{Kind: "Pod", Name: "x"}, Spec: spec})
	var env []string
	c := p.containers[0]
	for _, name := range c.env.order {
		v := c.env.get(name).value
		if isURLVar(name) {
			v = "http://" + proxyAddr
		}
		env = append(env, name+"="+v)
	}
	return append(env, "PATH="+os.Getenv("PATH"))
}

func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func hasRule(fs []Finding, id string) bool {
	for _, f := range fs {
		if f.Rule == id {
			return true
		}
	}
	return false
}

// TestCurlIgnoresUpperCaseHTTPProxy: curl-uppercase-http-proxy says curl
// sends http:// direct with only HTTP_PROXY; the real curl does, and the fix
// (http_proxy) sends it through the proxy.
func TestCurlIgnoresUpperCaseHTTPProxy(t *testing.T) {
	curl := needTool(t, "curl")
	proxyAddr, hits := fakeProxy(t)
	_, port, _ := net.SplitHostPort(originServer(t, "127.0.0.1"))
	target := "http://partner.test:" + port + "/"
	args := []string{"-sS", "--max-time", "10", "--resolve", "partner.test:" + port + ":127.0.0.1", target}
	for _, tc := range []struct {
		name    string
		env     []corev1.EnvVar
		finding bool
		want    string
	}{
		{"only-upper-case-goes-direct", env("HTTP_PROXY", "http://proxy:3128", "NO_PROXY", goodNP, "no_proxy", goodNP), true, "direct"},
		{"lower-case-fix-uses-proxy", env("HTTP_PROXY", "http://proxy:3128", "http_proxy", "http://proxy:3128", "NO_PROXY", goodNP, "no_proxy", goodNP), false, "via-proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "curlimages/curl:8.10.1", Env: tc.env}}}
			if got := hasRule(CheckPod(PodInput{Object: ObjectRef{Kind: "Pod", Name: "x"}, Spec: spec}), idCurlUpper); got != tc.finding {
				t.Fatalf("curl-uppercase-http-proxy reported = %v, want %v", got, tc.finding)
			}
			before := hits()
			if got := run(t, containerEnv(spec, proxyAddr), curl, args...); got != tc.want {
				t.Errorf("real curl answered %q, want %q", got, tc.want)
			}
			if went := hits() > before; went != (tc.want == "via-proxy") {
				t.Errorf("proxy used = %v", went)
			}
		})
	}
}

// TestPythonIgnoresCIDREntry: no-proxy-ignored-entry says Python's urllib
// ignores a CIDR entry; the real Python sends a request to an address inside
// the CIDR through the proxy, while an exact address entry keeps it direct.
func TestPythonIgnoresCIDREntry(t *testing.T) {
	python := needTool(t, "python3")
	proxyAddr, _ := fakeProxy(t)
	target := "http://" + originServer(t, "127.0.0.2") + "/"
	script := "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
	for _, tc := range []struct {
		name, np string
		finding  bool
		want     string
	}{
		{"cidr-entry-ignored", goodNP + ",127.0.0.0/8", true, "via-proxy"},
		{"exact-address-honoured", goodNP + ",127.0.0.2", false, "direct"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "python:3.12-slim",
				Env: env("HTTP_PROXY", "http://proxy:3128", "http_proxy", "http://proxy:3128", "NO_PROXY", tc.np, "no_proxy", tc.np)}}}
			fs := CheckPod(PodInput{Object: ObjectRef{Kind: "Pod", Name: "x"}, Spec: spec})
			got := false
			for _, f := range fs {
				got = got || (f.Rule == idNoProxyIgnored && strings.Contains(f.Message, "127.0.0.0/8") && strings.Contains(f.Message, "python-urllib"))
			}
			if got != tc.finding {
				t.Fatalf("CIDR finding = %v, want %v:\n%s", got, tc.finding, textOf(fs))
			}
			if out := run(t, containerEnv(spec, proxyAddr), python, "-c", script, target); out != tc.want {
				t.Errorf("real python answered %q, want %q", out, tc.want)
			}
		})
	}
}

package webhook

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
	"egret.io/egret/internal/testutil/tlslab"
	"egret.io/egret/internal/trust"
)

// TestInjectedCAWithRealClients runs real curl, Python requests, Node.js
// and Java in a pod network namespace, with exactly the environment Mutate
// gives an injected pod (sidecar mode: an egret proxy on 127.0.0.1:3128 in
// the pod) and the trust files the controller writes, mounted where the
// webhook mounts them. The origin outside is signed by the intercepting
// CA, which nothing but egret's injection makes them trust: each must
// reach it, fail without the injected CA variables, and fail on a
// public-looking origin signed by an untrusted CA.
func TestInjectedCAWithRealClients(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespaces and real clients")
	}
	netns.Require(t)
	lab := tlslab.New(t)
	egretBin := testutil.BuildEgret(t)
	pod, outside := netns.New(t, "capod"), netns.New(t, "caout")
	netns.Link(t, pod, outside, []string{"10.93.0.1/24"}, []string{"10.93.0.2/24"})

	inspect := tlslab.NewCA(t, "Corp TLS Inspection CA")
	rogue := tlslab.NewCA(t, "Rogue CA")
	serve := func(ca *tlslab.CA, name string) int {
		ln, err := outside.Listen("tcp", "10.93.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		return tlslab.Serve(t, ln, ca.Leaf(t, name))
	}
	corpURL := fmt.Sprintf("https://api.partner.example:%d/", serve(inspect, "api.partner.example"))
	rogueURL := fmt.Sprintf("https://www.shop-example.com:%d/", serve(rogue, "www.shop-example.com"))
	lab.Hosts = map[string]string{"api.partner.example": "10.93.0.2", "www.shop-example.com": "10.93.0.2"}

	// The sidecar: egret's proxy in the pod, resolving the test names itself.
	dir := t.TempDir()
	hosts := filepath.Join(dir, "egret-hosts")
	if err := os.WriteFile(hosts, []byte("10.93.0.2 api.partner.example www.shop-example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	proxy := pod.Command(ctx, egretBin, "proxy")
	proxy.Env = []string{"PATH=" + os.Getenv("PATH"), "EGRET_HOSTS_FILE=" + hosts, "EGRET_DNS_SERVERS=127.0.0.1:1", "EGRET_SSRF_ALLOW_CIDRS=10.93.0.0/24"}
	logf, err := os.Create(filepath.Join(dir, "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Stdout, proxy.Stderr = logf, logf
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = proxy.Process.Kill()
		_ = proxy.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("egret proxy:\n%s", b)
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := pod.Dial(ctx, "tcp", "127.0.0.1:3128")
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("egret proxy not listening: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// What the controller writes (the machine's system roots plus the
	// intercepting CA), where the kubelet would put it.
	sys, _, err := trust.SystemRoots()
	if err != nil {
		testutil.Missing(t, "no system CA bundle: "+err.Error())
	}
	b, err := trust.Build(sys, []*x509.Certificate{inspect.Cert})
	if err != nil {
		t.Fatal(err)
	}
	p12, err := b.TrustStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	vol := tlslab.NewVolume(t)
	vol.Write(t, map[string][]byte{trust.BundleFile: b.PEM(), trust.TrustStoreFile: p12})
	lab.Binds = map[string]string{trust.DefaultMountDir: vol.Dir}

	// The environment Mutate gives the app container.
	p := testPolicy(t, func(c *Config) {
		c.Mode = "sidecar"
		c.Trust = TrustConfig{ConfigMap: "corp-ca"}
	})
	res := Mutate(pod1(), Input{Policy: p, Namespace: ns("shop", optedIn, nil), Cluster: testCluster(), Trust: builtTrust, TrustBundle: egretsBundle})
	var app corev1.Container
	for _, c := range res.Pod.Spec.Containers {
		if c.Name == "app" {
			app = c
		}
	}
	var injected, withoutCA []string
	caVars := map[string]bool{}
	for _, v := range trust.InjectedEnv(trust.DefaultMountDir) {
		caVars[v.Name] = true
	}
	for _, e := range app.Env {
		injected = append(injected, e.Name+"="+e.Value)
		switch {
		case caVars[e.Name]:
		case e.Name == "JAVA_TOOL_OPTIONS":
			var keep []string
			for _, w := range strings.Fields(e.Value) {
				if !strings.HasPrefix(w, "-Djavax.net.ssl.") {
					keep = append(keep, w)
				}
			}
			withoutCA = append(withoutCA, e.Name+"="+strings.Join(keep, " "))
		default:
			withoutCA = append(withoutCA, e.Name+"="+e.Value)
		}
	}
	prefix := []string{"ip", "netns", "exec", pod.Name}
	for _, name := range []string{"curl", "python-requests", "node", "java"} {
		c, _ := tlslab.ClientByName(name)
		t.Run(name, func(t *testing.T) {
			lab.Need(t, c)
			if got := lab.Run(t, c, corpURL, injected, prefix...); !got.OK {
				t.Errorf("with egret's injection, %s: %s", corpURL, got)
			}
			if got := lab.Run(t, c, corpURL, withoutCA, prefix...); got.OK || !got.TrustFailure() {
				t.Errorf("without the injected CA, %s: %s (want a certificate failure)", corpURL, got)
			}
			if got := lab.Run(t, c, rogueURL, injected, prefix...); got.OK || !got.TrustFailure() {
				t.Errorf("untrusted origin %s: %s (want a certificate failure)", rogueURL, got)
			}
		})
	}

}

// pod1 is one app container with nothing set.
func pod1() *corev1.Pod {
	p := pod(nil)
	p.Spec.InitContainers = nil
	p.Spec.Containers = p.Spec.Containers[:1]
	return p
}

package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"egret.io/egret/internal/resolve"
)

// TestPodSearchList: the cluster domain and namespace a pod's search list
// names (resolv.conf itself is read by package resolve).
func TestPodSearchList(t *testing.T) {
	for _, tt := range []struct{ name, text, domain, ns string }{
		{"kubernetes-pod", "search shop.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n", "cluster.local", "shop"},
		{"custom-domain-and-host-search", "nameserver 10.0.0.10\nsearch Payments.svc.corp.example. svc.corp.example corp.example ec2.internal\n", "corp.example", "payments"},
		{"no-cluster", "search b.example\n", "", ""},
		{"empty", "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := resolvConf{resolve.ParseResolvConf(tt.text)}
			if d := rc.clusterDomain(); d != tt.domain {
				t.Errorf("clusterDomain = %q, want %q", d, tt.domain)
			}
			if ns := rc.namespace(); ns != tt.ns {
				t.Errorf("namespace = %q, want %q", ns, tt.ns)
			}
		})
	}
}

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in, host string
		port     uint16
		url      string
		err      string
	}{
		{in: "kubernetes.default.svc", host: "kubernetes.default.svc", port: 443},
		{in: "kubernetes", host: "kubernetes", port: 443},
		{in: "payments", host: "payments", port: 80},
		{in: "Payments.Shop.svc.:8080", host: "payments.shop.svc", port: 8080},
		{in: "10.96.0.1", host: "10.96.0.1", port: 80},
		{in: "[fd00::1]:443", host: "fd00::1", port: 443},
		{in: "fd00::1", host: "fd00::1", port: 80},
		{in: "http://inventory.shop/healthz", host: "inventory.shop", port: 80, url: "http://inventory.shop/healthz"},
		{in: "https://10.96.0.1:6443", host: "10.96.0.1", port: 6443, url: "https://10.96.0.1:6443/"},
		{in: "", err: "empty"},
		{in: "x:0", err: "bad port"},
		{in: "x:99999", err: "bad port"},
		{in: "ftp://x/", err: "only http"},
		{in: "http:///path", err: "no host"},
		{in: "a b", err: "not a host"},
	}
	for _, tt := range tests {
		t.Run(strings.NewReplacer(":", "-", "/", "-", "[", "", "]", "").Replace(orDefault(tt.in, "empty")), func(t *testing.T) {
			got, err := parseTarget(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.host != tt.host || got.port != tt.port {
				t.Errorf("got %s port %d", got.host, got.port)
			}
			if tt.url != "" && (got.url == nil || got.url.String() != tt.url) {
				t.Errorf("url = %v, want %s", got.url, tt.url)
			}
		})
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"kubernetes.default.svc", "x:80", "http://a/b", "[::1]:1", "fd00::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := parseTarget(s)
		if err != nil {
			return
		}
		if tg.host == "" || tg.port == 0 {
			t.Fatalf("%q: host %q port %d", s, tg.host, tg.port)
		}
		_ = tg.urlFor(tg.host)
		_ = tg.hostPort()
	})
}

func FuzzParseEnviron(f *testing.F) {
	f.Add([]byte("HTTPS_PROXY=http://u:p@gw:3128\x00NO_PROXY=.svc\x00\x00=x\x00junk\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for name := range parseEnviron(b) {
			if name == "" || strings.ContainsAny(name, "=\x00") {
				t.Fatalf("bad name %q from %q", name, b)
			}
		}
	})
}

// TestPID1CommandHidesPasswords: the command line shown in the report keeps
// no password, whether in a proxy URL argument, a flag's value or a JVM
// property.
func TestPID1CommandHidesPasswords(t *testing.T) {
	dir := t.TempDir()
	cmdline := strings.Join([]string{"java", "-Dhttps.proxyPassword=s3cret1", "--proxy=http://u:s3cret2@gw:3128", "http://u:s3cret3@gw:3128", "-jar", "app.jar"}, "\x00") + "\x00"
	if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte(cmdline), 0o644); err != nil {
		t.Fatal(err)
	}
	got := pid1Command(filepath.Join(dir, "environ"))
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "gw:3128") || !strings.HasPrefix(got, "java ") {
		t.Errorf("pid1Command = %q", got)
	}
}

package doctor

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseResolvConf(t *testing.T) {
	tests := []struct {
		name        string
		text        string
		search      []string
		ndots       int
		nameservers []string
		domain, ns  string
	}{
		{"kubernetes-pod", "search shop.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
			[]string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local"}, 5, []string{"10.96.0.10"}, "cluster.local", "shop"},
		{"custom-domain-and-host-search", "nameserver 10.0.0.10\nsearch Payments.svc.corp.example. svc.corp.example corp.example ec2.internal\noptions timeout:2 ndots:3 attempts:2\n",
			[]string{"payments.svc.corp.example", "svc.corp.example", "corp.example", "ec2.internal"}, 3, []string{"10.0.0.10"}, "corp.example", "payments"},
		{"comments-and-last-search-wins", "# generated\nsearch a.example\n; old\nsearch b.example # inline\nnameserver 1.1.1.1\nnameserver fd00::10\n",
			[]string{"b.example"}, 1, []string{"1.1.1.1", "fd00::10"}, "", ""},
		{"domain-line", "domain corp.example\n", []string{"corp.example"}, 1, nil, "", ""},
		{"ndots-capped-and-bad-ignored", "options ndots:99\noptions ndots:x\n", nil, 15, nil, "", ""},
		{"empty", "", nil, 1, nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := parseResolvConf(tt.text)
			if !reflect.DeepEqual(rc.search, tt.search) || rc.ndots != tt.ndots || !reflect.DeepEqual(rc.nameservers, tt.nameservers) {
				t.Errorf("got search %q ndots %d nameservers %q", rc.search, rc.ndots, rc.nameservers)
			}
			if d := rc.clusterDomain(); d != tt.domain {
				t.Errorf("clusterDomain = %q, want %q", d, tt.domain)
			}
			if ns := rc.namespace(); ns != tt.ns {
				t.Errorf("namespace = %q, want %q", ns, tt.ns)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	rc := parseResolvConf("search shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n")
	tests := []struct {
		name, host string
		want       []string
	}{
		{"short-name-searched-first", "payments", []string{"payments.shop.svc.cluster.local.", "payments.svc.cluster.local.", "payments.cluster.local.", "payments."}},
		{"absolute-only-itself", "payments.shop.svc.cluster.local.", []string{"payments.shop.svc.cluster.local."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rc.candidates(tt.host); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	rc.ndots = 1
	if got := rc.candidates("api.example.com"); got[0] != "api.example.com." {
		t.Errorf("with ndots 1 a dotted name is tried as is first: %q", got)
	}
}

func FuzzParseResolvConf(f *testing.F) {
	f.Add("search a.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n")
	f.Add("domain x\noptions ndots:-1 ndots:\n#\n;")
	f.Fuzz(func(t *testing.T, s string) {
		rc := parseResolvConf(s)
		if rc.ndots < 0 || rc.ndots > 15 || len(rc.search) > 32 {
			t.Fatalf("%q: ndots %d, %d search domains", s, rc.ndots, len(rc.search))
		}
		for _, c := range rc.candidates("x") {
			if !strings.HasSuffix(c, ".") {
				t.Fatalf("candidate %q is not absolute", c)
			}
		}
	})
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

func TestParseProxyStatus(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []psEntry
	}{
		{"egret-upstream-auth", []string{`egret; error=upstream_auth_required; next-hop="http://u:xxxxx@squid:3128"; details="upstream rejected egret's credentials (407)"`},
			[]psEntry{{"egret", map[string]string{"error": "upstream_auth_required", "next-hop": "http://u:xxxxx@squid:3128", "details": "upstream rejected egret's credentials (407)"}}}},
		{"list-and-several-fields", []string{`"gw.example"; error=dns_timeout, egret; error=pool_unavailable`, `edge; received-status=502`},
			[]psEntry{{"gw.example", map[string]string{"error": "dns_timeout"}}, {"egret", map[string]string{"error": "pool_unavailable"}}, {"edge", map[string]string{"received-status": "502"}}}},
		{"commas-and-semicolons-inside-strings", []string{`egret; error=http_request_denied; details="a, b; c \"d\""`},
			[]psEntry{{"egret", map[string]string{"error": "http_request_denied", "details": `a, b; c "d"`}}}},
		{"boolean-param-and-junk", []string{`egret; x; error=connection_refused, "unterminated; error=y, ; =z`},
			[]psEntry{{"egret", map[string]string{"x": "?1", "error": "connection_refused"}}}},
		{"empty", []string{""}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseProxyStatus(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func FuzzParseProxyStatus(f *testing.F) {
	f.Add(`egret; error=upstream_auth_required; next-hop="http://squid:3128"; details="x"`)
	f.Add(`a, b; c="d,e"; f`)
	f.Fuzz(func(t *testing.T, s string) {
		es := parseProxyStatus([]string{s})
		if len(es) > 16 {
			t.Fatalf("%d entries", len(es))
		}
		for _, e := range es {
			if e.proxy == "" || e.params == nil {
				t.Fatalf("%q: entry %#v", s, e)
			}
		}
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

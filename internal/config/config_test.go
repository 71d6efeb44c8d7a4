package config

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func load(t *testing.T, src Sources) *Proxy {
	t.Helper()
	if src.Env == nil {
		src.Env = env()
	}
	p, err := Load(src)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return p
}

func decide(t *testing.T, p *Proxy, dest string) route.Decision {
	t.Helper()
	tbl, err := route.New(p.Rules, p.Default, p.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	d, err := route.ParseDest(dest, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tbl.Decide(t.Context(), d, nil)
}

func TestDefaults(t *testing.T) {
	p := load(t, Sources{})
	if p.Role != RoleSidecar || p.Listen != "127.0.0.1:3128" || p.AdminListen != "127.0.0.1:9901" {
		t.Errorf("sidecar defaults: %+v", p)
	}
	if p.Default != route.Direct || len(p.Pools) != 0 || len(p.Rules) != 0 {
		t.Errorf("with no upstream the default route must be direct: %v pools=%v rules=%v", p.Default, p.Pools, p.Rules)
	}
	if !p.AccessLog || p.DrainPeriod != SidecarDrainPeriod || p.DrainTimeout != DefaultDrainTimeout {
		t.Errorf("defaults: access=%v drain=%v/%v", p.AccessLog, p.DrainPeriod, p.DrainTimeout)
	}
	g := load(t, Sources{Env: env("EGRET_ROLE", "gateway")})
	if g.Listen != ":3128" || g.AdminListen != ":9901" || g.DrainPeriod != GatewayDrainPeriod {
		t.Errorf("gateway defaults: %+v", g)
	}
}

// The environment of a real sidecar manifest works unchanged.
func TestSidecarManifestEnv(t *testing.T) {
	p := load(t, Sources{Env: env(
		"LISTEN_ADDR", "127.0.0.1:3128",
		"DIRECT_CIDRS", "10.0.0.0/8, 172.16.0.0/12",
		"DIRECT_SUFFIXES", ".svc,.cluster.local,.internal",
		"UPSTREAM_PROXY", "http://svc-egress:p%40ss%3Aword@proxy.corp.example:3128",
	)})
	ms := p.Pools[DefaultPool].Members
	if len(ms) != 1 || ms[0].Name() != "http://proxy.corp.example:3128" {
		t.Fatalf("pool = %v", ms)
	}
	if want := "Basic " + b64("svc-egress:p@ss:word"); memberAuth(ms[0]) != want {
		t.Errorf("credentials not percent-decoded: auth %q", memberAuth(ms[0]))
	}
	if p.Default != route.Upstream || p.DefaultPool != DefaultPool {
		t.Errorf("default = %v:%s, want upstream:default", p.Default, p.DefaultPool)
	}
	for dest, want := range map[string]route.Action{
		"payments.default.svc:80": route.Direct, "api.ns.svc.cluster.local:443": route.Direct,
		"db.internal:5432": route.Direct, "10.2.3.4:443": route.Direct, "172.20.0.1:80": route.Direct,
		"api.partner.example:443": route.Upstream, "8.8.8.8:443": route.Upstream, "127.0.0.1:8080": route.Direct,
	} {
		if got := decide(t, p, dest); got.Action != want {
			t.Errorf("%s → %v (%s), want %v", dest, got.Action, got.Detail(), want)
		}
	}
}

func TestProxyVariablesFromSecret(t *testing.T) {
	p := load(t, Sources{Env: env(
		"HTTP_PROXY", "http://u:pw@proxy.corp:8080", "HTTPS_PROXY", "http://u:pw@proxy.corp:8080",
		"http_proxy", "http://u:pw@proxy.corp:8080", "https_proxy", "http://u:pw@proxy.corp:8080",
		"NO_PROXY", "localhost,.svc,10.0.0.0/8,registry.corp:5000,*.example.net",
		"no_proxy", "something-else",
	)})
	if ms := p.Pools[DefaultPool].Members; len(ms) != 1 || ms[0].Name() != "http://proxy.corp:8080" {
		t.Fatalf("pool = %v", ms)
	}
	for dest, want := range map[string]route.Action{
		"a.b.svc:80": route.Direct, "10.1.1.1:80": route.Direct, "registry.corp:5000": route.Direct,
		"registry.corp:443": route.Upstream, "www.example.net:443": route.Direct, "example.net:443": route.Upstream,
	} {
		if got := decide(t, p, dest); got.Action != want {
			t.Errorf("%s → %v (%s), want %v", dest, got.Action, got.Detail(), want)
		}
	}
	if !hasNote(p, "NO_PROXY and no_proxy differ") {
		t.Errorf("no note about the differing cases: %v", p.Notes)
	}
}

func TestProxyVariablePointingAtEgretIsIgnored(t *testing.T) {
	// Sidecars inherit the app's HTTP_PROXY=http://127.0.0.1:3128.
	p := load(t, Sources{Env: env("HTTP_PROXY", "http://127.0.0.1:3128", "https_proxy", "localhost:3128")})
	if len(p.Pools) != 0 || p.Default != route.Direct {
		t.Errorf("egret used itself as upstream: pools=%v default=%v", p.Pools, p.Default)
	}
	if !hasNote(p, "egret's own listener") {
		t.Errorf("notes = %v", p.Notes)
	}
}

func TestProxyHostShape(t *testing.T) {
	p := load(t, Sources{Env: env("PROXY_HOST", "proxy.corp", "PROXY_USER", "bob", "PROXY_PASS", "s3cr:t@")})
	ms := p.Pools[DefaultPool].Members
	if len(ms) != 1 || ms[0].Name() != "http://proxy.corp:3128" || memberAuth(ms[0]) != "Basic "+b64("bob:s3cr:t@") {
		t.Fatalf("PROXY_HOST pool = %v auth %q", ms, memberAuth(ms[0]))
	}
	p = load(t, Sources{Env: env("PROXY_HOST", "proxy.corp:8443", "PROXY_SCHEME", "https")})
	if ms := p.Pools[DefaultPool].Members; ms[0].Name() != "https://proxy.corp:8443" || ms[0].OwnAuth {
		t.Errorf("PROXY_HOST with port and scheme = %v", ms[0].Name())
	}
	// PROXY_USER/PROXY_PASS also fill UPSTREAM_PROXY members given without them,
	// but never replace inline credentials.
	p = load(t, Sources{Env: env("UPSTREAM_PROXY", "http://a:3128,http://x:y@b:3128", "PROXY_USER", "bob", "PROXY_PASS", "pw")})
	ms = p.Pools[DefaultPool].Members
	if memberAuth(ms[0]) != "Basic "+b64("bob:pw") || memberAuth(ms[1]) != "Basic "+b64("x:y") {
		t.Errorf("credentials: %q %q", memberAuth(ms[0]), memberAuth(ms[1]))
	}
}

func TestPrecedence(t *testing.T) {
	files := map[string]string{"egret.yaml": `
listen: 127.0.0.1:4000
direct:
  suffixes: [.from-file]
  cidrs: [192.168.0.0/16]
pools:
  default:
    members: [http://file-proxy:3128]
`}
	read := func(n string) ([]byte, error) {
		if s, ok := files[n]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	p := load(t, Sources{File: "egret.yaml", ReadFile: read})
	if p.Listen != "127.0.0.1:4000" || p.Pools[DefaultPool].Members[0].Name() != "http://file-proxy:3128" {
		t.Errorf("file: listen %s pool %v", p.Listen, p.Pools)
	}
	p = load(t, Sources{File: "egret.yaml", ReadFile: read, Env: env("LISTEN_ADDR", "127.0.0.1:5000", "DIRECT_SUFFIXES", ".from-env", "UPSTREAM_PROXY", "http://env-proxy:3128")})
	if p.Listen != "127.0.0.1:5000" || p.Pools[DefaultPool].Members[0].Name() != "http://env-proxy:3128" {
		t.Errorf("env over file: listen %s pool %v", p.Listen, p.Pools)
	}
	if got := decide(t, p, "x.from-file:80"); got.Action == route.Direct {
		t.Error("an env list must replace the file's list, not add to it")
	}
	if got := decide(t, p, "x.from-env:80"); got.Action != route.Direct {
		t.Error("env suffix not applied")
	}
	if got := decide(t, p, "192.168.1.1:80"); got.Action != route.Direct {
		t.Error("the file's CIDRs must stay when only the suffixes are overridden")
	}
	p = load(t, Sources{File: "egret.yaml", ReadFile: read, Env: env("LISTEN_ADDR", "127.0.0.1:5000"), Flags: map[string]string{"LISTEN_ADDR": "127.0.0.1:6000", "UPSTREAM_PROXY": "http://flag-proxy:3128"}})
	if p.Listen != "127.0.0.1:6000" || p.Pools[DefaultPool].Members[0].Name() != "http://flag-proxy:3128" {
		t.Errorf("flags over env: listen %s pool %v", p.Listen, p.Pools)
	}
	// Aliases are read when the main name is unset.
	if p := load(t, Sources{Env: env("EGRET_LISTEN", "127.0.0.1:7000")}); p.Listen != "127.0.0.1:7000" {
		t.Errorf("alias EGRET_LISTEN ignored: %s", p.Listen)
	}
}

func TestFullExampleFile(t *testing.T) {
	p := load(t, Sources{File: "testdata/full.yaml"})
	if p.Role != RoleGateway || p.Via != "egress-gw" || len(p.Pools) != 2 || p.Timeouts.TunnelIdle != 30*time.Minute ||
		p.Intercept == nil || len(p.Intercept.Sites) != 1 || p.Intercept.Sites[0].Credentials[0].Files[0] != "/var/run/secrets/egret/credentials/models-key/token" {
		t.Errorf("parsed: %+v", p)
	}
	for dest, want := range map[string]string{
		"api.partner.example:443": "upstream/critical", "api.partner.example:80": "upstream/default",
		"mail.example.org:25": "deny/", "x.evil.example:443": "deny/", "registry.corp:443": "direct/",
		"git.corp.internal:22": "direct/", "www.example.org:443": "upstream/default",
	} {
		got := decide(t, p, dest)
		if s := got.Action.String() + "/" + got.Pool; s != want {
			t.Errorf("%s → %s (%s), want %s", dest, s, got.Detail(), want)
		}
	}
	if a := p.Resolver.Hosts["registry.corp"]; len(a) != 1 || a[0] != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("resolver hosts = %v", p.Resolver.Hosts)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		file  string
		env   []string
		flags map[string]string
		want  string
	}{
		{"bad-cidr", "", []string{"DIRECT_CIDRS", "10.0.0.0/33"}, nil, `CIDR "10.0.0.0/33"`},
		{"bad-suffix", "", []string{"DIRECT_SUFFIXES", ".svc,bad suffix!"}, nil, `suffix "suffix!"`},
		{"bad-duration", "", []string{"EGRET_DIAL_TIMEOUT", "ten"}, nil, "EGRET_DIAL_TIMEOUT"},
		{"bad-role", "", []string{"EGRET_ROLE", "mesh"}, nil, `role "mesh"`},
		{"bad-listen", "", []string{"LISTEN_ADDR", "3128"}, nil, "want host:port"},
		{"listen-on-name", "", []string{"LISTEN_ADDR", "proxy.local:3128"}, nil, "IP address"},
		{"bad-default", "", []string{"DEFAULT_ROUTE", "sideways"}, nil, "unknown route action"},
		{"upstream-without-pool", "", []string{"DEFAULT_ROUTE", "upstream"}, nil, `pool "default" has no members`},
		{"route-names-missing-pool", "routes:\n- hosts: [a.example]\n  action: upstream:nope\n", nil, nil, `pool "nope" has no members`},
		{"unknown-field", "listne: 1.2.3.4:1\n", nil, nil, `x.yaml:1:1: listne: unknown key "listne"; did you mean "listen"?`},
		{"bad-version", "version: 2\n", nil, nil, "version 2"},
		{"rule-matches-nothing", "routes:\n- action: direct\n", nil, nil, "matches nothing"},
		{"bad-port", "routes:\n- ports: [70000]\n  action: deny\n", nil, nil, "port 70000"},
		{"bad-scheme", "", []string{"UPSTREAM_PROXY", "ftp://u:hunter2@p:21"}, nil, "unsupported scheme"},
		{"credentials-in-argv", "", nil, map[string]string{"UPSTREAM_PROXY": "http://u:hunter2@p:3128"}, "credentials on the command line"},
		{"bad-access-log", "", []string{"EGRET_ACCESS_LOG", "maybe"}, nil, "EGRET_ACCESS_LOG"},
		{"bad-hosts-entry", "resolver:\n  hosts:\n    a.example: [not-an-ip]\n", nil, nil, "not an IP address"},
		{"bad-dns-server", "", []string{"EGRET_DNS_SERVERS", "dns.example"}, nil, "want ip or ip:port"},
		{"trust-dir-alone", "", []string{"EGRET_TRUST_DIR", "/etc/egret/trust"}, nil, "go together"},
		{"trust-digest-alone", "", []string{"EGRET_TRUST_DIGEST", strings.Repeat("a", 64)}, nil, "go together"},
		{"trust-digest-short", "", []string{"EGRET_TRUST_DIR", "/t", "EGRET_TRUST_DIGEST", "abc"}, nil, "want 64 hex digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := Sources{Env: env(tc.env...), Flags: tc.flags}
			if tc.file != "" {
				src.File = "x.yaml"
				src.ReadFile = func(string) ([]byte, error) { return []byte(tc.file), nil }
			}
			_, err := Load(src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows a password: %v", err)
			}
		})
	}
	// Several mistakes are reported together.
	_, err := Load(Sources{Env: env("DIRECT_CIDRS", "x", "EGRET_ROLE", "y")})
	if err == nil || !strings.Contains(err.Error(), "CIDR") || !strings.Contains(err.Error(), "role") {
		t.Errorf("want both errors, got %v", err)
	}
	if _, err := Load(Sources{File: "/nonexistent/egret.yaml", Env: env()}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzParseFile(f *testing.F) {
	b, _ := os.ReadFile("testdata/full.yaml")
	f.Add(string(b))
	f.Add("routes:\n- hosts: ['*']\n  action: deny\n")
	f.Add("pools:\n  '':\n    members: [':::']\n")
	f.Fuzz(func(t *testing.T, s string) {
		file, err := ParseFile([]byte(s))
		if err != nil {
			return
		}
		// Whatever parses either compiles or fails with an error.
		p, err := compile(file, Sources{Env: env(), ReadFile: func(string) ([]byte, error) { return nil, fs.ErrNotExist }})
		if err == nil {
			if _, err := route.New(p.Rules, p.Default, p.DefaultPool); err != nil {
				t.Fatalf("a valid config made an invalid table: %v\n%s", err, s)
			}
		}
	})
}

func hasNote(p *Proxy, s string) bool {
	for _, n := range p.Notes {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

func TestSplitMembers(t *testing.T) {
	for in, want := range map[string][]string{
		"http://a:3128,http://b:3128":           {"http://a:3128", "http://b:3128"},
		"http://u:pa,ss@a:3128,http://b:3128":   {"http://u:pa,ss@a:3128", "http://b:3128"},
		"http://u:p,a,ss@a:3128":                {"http://u:p,a,ss@a:3128"},
		"a:3128,b:3128":                         {"a:3128", "b:3128"},
		"http://u:p%2Cw@a:3128,socks5://c:1080": {"http://u:p%2Cw@a:3128", "socks5://c:1080"},
		"http://u:p@a:3128,x@b:3128":            {"http://u:p@a:3128", "x@b:3128"},
	} {
		if got := splitMembers(in); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("splitMembers(%q) = %q, want %q", in, got, want)
		}
	}
}

// memberAuth is the Proxy-Authorization a member spec's own credentials make.
func memberAuth(m upstream.MemberSpec) string {
	return upstream.AuthHeader(upstream.NewMember(m).Credential())
}

// TestNoProxyEntriesGoIgnores: egret's own NO_PROXY is shared with the
// pod's other clients; an entry Go's rules never match (a bracketed IPv6
// address without a port, an empty label) is ignored with a note, and the
// proxy starts (the shipped gateway reads discovery's NO_PROXY).
func TestNoProxyEntriesGoIgnores(t *testing.T) {
	p := load(t, Sources{Env: env("NO_PROXY", "[fd00:ec2::254],.svc,a..b,fd00:ec2::254")})
	notes := strings.Join(p.Notes, "\n")
	if !strings.Contains(notes, "[fd00:ec2::254]") || !strings.Contains(notes, "a..b") {
		t.Errorf("notes %q: want both ignored entries named", notes)
	}
	for dest, want := range map[string]route.Action{"api.svc:443": route.Direct, "[fd00:ec2::254]:80": route.Direct, "example.com:443": route.Direct} {
		if d := decide(t, p, dest); d.Action != want {
			t.Errorf("%s: %v, want %v", dest, d.Action, want)
		}
	}
}

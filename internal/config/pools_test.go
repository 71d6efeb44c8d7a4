package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/upstream"
)

func loadWith(t *testing.T, env map[string]string, yaml string) (*Proxy, error) {
	t.Helper()
	src := Sources{Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, DefaultCredentialsDir: "-"}
	if yaml != "" {
		src.File = filepath.Join(t.TempDir(), "egret.yaml")
		os.WriteFile(src.File, []byte(yaml), 0o644)
	}
	return Load(src)
}

func TestPoolsConfig(t *testing.T) {
	dir := t.TempDir()
	members := filepath.Join(dir, "members")
	os.WriteFile(members, []byte("http://c:3128 backup\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "username"), []byte("u\n"), 0o644)
	p, err := loadWith(t, map[string]string{"PROXY_CREDENTIALS_DIR": dir, "PROXY_USER": "env-user", "PROXY_PASS": "env-pass"}, `
pools:
  critical:
    policy: sticky
    members:
      - "http://a:3128 weight=3"
      - {url: "https://b:443", weight: 2}
    members_file: `+members+`
    backoff: {initial: 2s, max: 1m}
    probe: {target: "probe.test:443", interval: 5s}
routes:
  - {suffixes: [.partner.test], action: "upstream:critical"}
  - {suffixes: [.new.test], action: deny, report: true}
deny_report: {suffixes: [.maybe.test]}
gateway: {client_cidrs: [10.0.0.0/8], allow_cidrs: [169.254.170.2]}
limits:
  max_tunnels: 5000
  per_client: {max_concurrent: 100}
  per_destination: {rate: 50, burst: 100}
  destinations: [{suffixes: [slow.test], max_concurrent: 4}]
  breaker: {failures: 5, open_for: 10s}
`)
	if err != nil {
		t.Fatal(err)
	}
	ms := p.Pools["critical"].Members
	if len(ms) != 3 || ms[0].Weight != 3 || ms[1].Weight != 2 || !ms[2].Backup {
		t.Fatalf("members %v", ms)
	}
	if ms[0].OwnAuth {
		t.Error("PROXY_USER was applied although a credentials directory is set")
	}
	o := p.Pools["critical"]
	if o.Policy != upstream.Sticky || o.Backoff.Initial != 2*time.Second || o.Probe.Target != "probe.test:443" || o.Probe.Interval != 5*time.Second || len(o.Static) != 2 || o.MembersFile != members {
		t.Errorf("options %+v", o)
	}
	if !p.Credentials.Required || p.Credentials.Dir != dir {
		t.Errorf("credentials %+v", p.Credentials)
	}
	var reports int
	for _, r := range p.Rules {
		if r.Report {
			reports++
		}
	}
	if reports != 2 {
		t.Errorf("%d report-only rules, want 2", reports)
	}
	if p.Gateway.SSRFGuard || len(p.Gateway.ClientCIDRs) != 1 || p.Gateway.AllowCIDRs[0].String() != "169.254.170.2/32" {
		t.Errorf("gateway %+v", p.Gateway)
	}
	l := p.Limits
	if l.MaxTunnels != 5000 || l.ClientMaxConcurrent != 100 || l.PerDestination.Rate != 50 || len(l.Destinations) != 1 || l.Breaker.Failures != 5 || l.Breaker.OpenFor != 10*time.Second {
		t.Errorf("limits %+v", l)
	}
}

func TestPoolsConfigEnv(t *testing.T) {
	p, err := loadWith(t, map[string]string{
		"UPSTREAM_PROXY": "http://a:3128 weight=2, http://b:3128 backup", "EGRET_UPSTREAM_POLICY": "least_conn",
		"EGRET_ROLE": "gateway", "EGRET_DEST_RATE": "20/s", "EGRET_BREAKER_FAILURES": "3", "DENY_REPORT_SUFFIXES": ".x.test",
		"EGRET_CLIENT_CIDRS": "10.0.0.0/8,192.168.0.0/16",
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	ms := p.Pools[DefaultPool].Members
	if len(ms) != 2 || ms[0].Weight != 2 || !ms[1].Backup || p.Pools[DefaultPool].Policy != upstream.LeastConn {
		t.Errorf("default pool %v %+v", ms, p.Pools[DefaultPool])
	}
	if !p.Gateway.SSRFGuard || p.Limits.PerDestination.Rate != 20 || p.Limits.Breaker.Failures != 3 || len(p.Gateway.ClientCIDRs) != 2 {
		t.Errorf("gateway defaults: %+v %+v", p.Gateway, p.Limits)
	}
}

func TestPoolsConfigErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		env        map[string]string
		want       string
	}{
		{"bad-policy", "pools: {p: {members: [http://a:1], policy: fastest}}", nil, "unknown pool policy"},
		{"bad-weight-object", `pools: {p: {members: [{url: "http://a:1", weight: 500}]}}`, nil, "weight 500"},
		{"bad-weight-string", `pools: {p: {members: ["http://a:1 weight=0"]}}`, nil, "weight"},
		{"member-object-unknown-field", `pools: {p: {members: [{url: "http://a:1", wieght: 2}]}}`, nil, `pools.p.members[0].wieght: unknown key "wieght"; did you mean "weight"?`},
		{"missing-members-file", "pools: {p: {members_file: /nonexistent/egret-members}}", nil, "members_file"},
		{"bad-probe", "pools: {p: {members: [http://a:1], probe: {target: nohost}}}", nil, "host:port"},
		{"bad-ca", "pools: {p: {members: [https://a:1], tls: {ca_file: /nonexistent/ca.pem}}}", nil, "ca_file"},
		{"report-on-direct", "routes: [{hosts: [a.test], action: direct, report: true}]", nil, "deny rules only"},
		{"bad-client-cidr", "gateway: {client_cidrs: [nonsense]}", nil, "client_cidrs"},
		{"negative-limit", "limits: {destinations: [{hosts: [a], rate: -1}]}", nil, "negative"},
		{"bad-env-rate", "", map[string]string{"EGRET_DEST_RATE": "fast"}, "EGRET_DEST_RATE"},
		{"bad-ssrf-guard", "", map[string]string{"EGRET_SSRF_GUARD": "maybe"}, "EGRET_SSRF_GUARD"},
		{"bad-short-names", "", map[string]string{"EGRET_SHORT_NAMES": "expand"}, "want refuse, route or off"},
		{"bad-short-names-file", "gateway: {short_names: resolve}", nil, "want refuse, route or off"},
		{"bad-cluster-domain", "", map[string]string{"EGRET_CLUSTER_DOMAIN": "cluster..local"}, "EGRET_CLUSTER_DOMAIN"},
		{"missing-credentials-dir", "", map[string]string{"PROXY_CREDENTIALS_DIR": "/nonexistent/egret-creds"}, "credentials directory"},
		{"bad-breaker-open", "limits: {breaker: {failures: 2, open_for: soon}}", nil, "open_for"},
		{"secret-not-in-error", `pools: {p: {members: ["http://u:hunter2@a:1 weight=x"]}}`, nil, "weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadWith(t, tt.env, tt.yaml)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error holds the password: %v", err)
			}
		})
	}
}

func FuzzMemberSpecJSON(f *testing.F) {
	f.Add(`"http://a:1 weight=2"`)
	f.Add(`{"url":"http://a:1","weight":3,"backup":true}`)
	f.Add(`{"weight":1}`)
	f.Fuzz(func(t *testing.T, s string) {
		var m MemberSpec
		if err := m.UnmarshalJSON([]byte(s)); err != nil {
			return
		}
		memberSpecs([]MemberSpec{m}, "fuzz")
	})
}

func TestMemberAuthConfig(t *testing.T) {
	p, err := loadWith(t, nil, `
pools:
  corp:
    members:
      - "http://ntlm.corp:8080 auth=ntlm"
      - {url: "http://kerb.corp:8080", auth: negotiate, spn: HTTP/proxy-vip.corp}
      - {url: "http://plain.corp:8080"}
routes:
  - {suffixes: [.corp], action: "upstream:corp"}
`)
	if err != nil {
		t.Fatal(err)
	}
	ms := p.Pools["corp"].Members
	if len(ms) != 3 || ms[0].Auth.String() != "ntlm" || ms[1].Auth.String() != "negotiate" || ms[1].ServicePrincipal() != "HTTP/proxy-vip.corp" || ms[2].Auth.String() != "basic" {
		t.Fatalf("members %v", ms)
	}
	for _, bad := range []struct{ member, err string }{
		{`{url: "http://k.corp", auth: kerberos5}`, "pools.corp.members[0]: auth \"kerberos5\": want basic, ntlm or negotiate"},
		{`{url: "socks5://k.corp", auth: ntlm}`, "needs an http:// or https:// member"},
		{`{url: "http://k.corp", spn: HTTP/k.corp}`, "spn= is for auth=negotiate"},
	} {
		_, err := loadWith(t, nil, "pools:\n  corp:\n    members:\n      - "+bad.member+"\n")
		if err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("%s: err = %v, want %q", bad.member, err, bad.err)
		}
	}
}

// TestPoolNamespaces: pools.<name>.namespaces, the namespaces whose
// EgressPolicies may name the pool (docs/policy.md, "Who may set what").
func TestPoolNamespaces(t *testing.T) {
	p, err := loadWith(t, nil, `
pools:
  critical: {members: ["http://a:3128"], namespaces: [shop, payments]}
  shared: {members: ["http://b:3128"], namespaces: ["*"]}
  private: {members: ["http://c:3128"]}
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pool, ns string
		want     bool
	}{
		{"critical", "shop", true}, {"critical", "payments", true}, {"critical", "other", false},
		{"shared", "other", true}, {"private", "shop", false}, {"missing", "shop", false},
	} {
		if got := p.Pools[tc.pool].Grants(tc.ns); got != tc.want {
			t.Errorf("pool %s grants %s: %v, want %v", tc.pool, tc.ns, got, tc.want)
		}
	}
	_, err = loadWith(t, nil, `
pools:
  critical: {members: ["http://a:3128"], namespaces: [Shop]}
`)
	if err == nil || !strings.Contains(err.Error(), `pools.critical.namespaces: "Shop" is not a namespace name`) {
		t.Errorf("bad namespace: %v", err)
	}
}

// TestShortNamesConfig: EGRET_SHORT_NAMES and EGRET_CLUSTER_DOMAIN, from
// the environment or the file's gateway section; refuse is the default.
func TestShortNamesConfig(t *testing.T) {
	p, err := loadWith(t, nil, "")
	if err != nil || p.Gateway.RouteShortNames || p.Gateway.ClusterDomain != "" {
		t.Fatalf("defaults: %+v, %v", p.Gateway, err)
	}
	p, err = loadWith(t, nil, "gateway: {short_names: route, cluster_domain: Corp.Example.}")
	if err != nil || !p.Gateway.RouteShortNames || p.Gateway.ClusterDomain != "corp.example" {
		t.Fatalf("file: %+v, %v", p.Gateway, err)
	}
	p, err = loadWith(t, map[string]string{"EGRET_SHORT_NAMES": "refuse"}, "gateway: {short_names: route}")
	if err != nil || p.Gateway.RouteShortNames {
		t.Fatalf("the environment wins: %+v, %v", p.Gateway, err)
	}
	p, err = loadWith(t, map[string]string{"EGRET_SHORT_NAMES": "off"}, "")
	if err != nil || !p.Gateway.ResolveShortNames || p.Gateway.RouteShortNames {
		t.Fatalf("off: %+v, %v", p.Gateway, err)
	}
}

package iptables

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	goldenfile "egret.io/egret/internal/testutil/golden"
)

// goldenCases are the flag sets whose restore text is pinned in testdata.
var goldenCases = []struct {
	name string
	spec Spec
}{
	{"defaults", Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: 15001}},
	{"spec-contract", Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: 15001,
		ExcludeCIDRs: []string{"10.96.0.0/12,10.244.0.0/16"}}},
	{"gid-ports-interfaces", Spec{ProxyUID: 1337, ProxyGID: 1337, RedirectPort: 15006,
		ExcludePorts: []string{"22", "8000-8100"}, ExcludeInterfaces: []string{"eth1", "wg+"},
		ExcludeCIDRs: []string{"169.254.169.254"}}},
	{"include", Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: 15001,
		IncludeCIDRs: []string{"0.0.0.0/1", "128.0.0.0/1"}, ExcludeCIDRs: []string{"10.0.0.0/8"}}},
	{"ipv6", Spec{ProxyUID: 1337, ProxyGID: 1337, RedirectPort: 15001, IPv6: true,
		ExcludeCIDRs: []string{"10.96.0.0/12", "fd00:10:96::/112", "fe80::/10"}, ExcludePorts: []string{"53"}}},
	{"ipv6-include", Spec{ProxyUID: 2000, ProxyGID: -1, RedirectPort: 15001, IPv6: true,
		IncludeCIDRs: []string{"2001:db8::/32", "198.51.100.0/24"}}},
	// What the webhook writes beside an Istio sidecar (egret.io/mesh: exclude).
	{"mesh-exclude", Spec{ProxyUID: 15337, ProxyGID: -1, ExcludeUIDs: []string{"1337"}, RedirectPort: 15401,
		ExcludePorts: []string{"15000-15090"}, ExcludeCIDRs: []string{"10.96.0.0/12"}}},
}

// render is what `egret iptables print` shows for c: one restore block per
// family, each headed by the program that takes it.
func render(c Config) string {
	var b strings.Builder
	for _, fam := range c.Families() {
		b.WriteString("# " + fam.String() + ": " + fam.tool() + "-restore --noflush\n")
		b.WriteString(Build(c, fam).RestoreText())
	}
	return b.String()
}

func TestGoldenRestoreText(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.spec.Compile()
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", tc.name+".golden"), render(c))
		})
	}
}

func TestEveryRuleHasComment(t *testing.T) {
	for _, tc := range goldenCases {
		c, _ := tc.spec.Compile()
		for _, fam := range c.Families() {
			for _, r := range Build(c, fam).Rules {
				if !strings.Contains(r.Line(), `--comment "egret: `) {
					t.Errorf("%s/%s: rule without egret comment: %s", tc.name, fam, r.Line())
				}
				argv := r.Argv()
				if !slices.Contains(argv, "egret: "+r.Comment) || argv[2] != "-A" || argv[3] != r.Chain {
					t.Errorf("%s/%s: bad argv %q", tc.name, fam, argv)
				}
			}
		}
	}
}

func TestCompile(t *testing.T) {
	base := func(f func(*Spec)) Spec {
		s := Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: 15001}
		f(&s)
		return s
	}
	good := []struct {
		name  string
		spec  Spec
		check func(Config) bool
	}{
		{"bare-ip-becomes-host-prefix", base(func(s *Spec) { s.ExcludeCIDRs = []string{"169.254.169.254", "fd00::1"} }),
			func(c Config) bool {
				return c.ExcludeCIDRs[0] == netip.MustParsePrefix("169.254.169.254/32") && c.ExcludeCIDRs[1] == netip.MustParsePrefix("fd00::1/128")
			}},
		{"host-bits-masked", base(func(s *Spec) { s.ExcludeCIDRs = []string{"10.1.2.3/8"} }),
			func(c Config) bool { return c.ExcludeCIDRs[0] == netip.MustParsePrefix("10.0.0.0/8") }},
		{"mapped-unmapped", base(func(s *Spec) { s.IncludeCIDRs = []string{"::ffff:10.0.0.0/104"} }),
			func(c Config) bool { return c.IncludeCIDRs[0] == netip.MustParsePrefix("10.0.0.0/8") }},
		{"commas-blanks-duplicates", base(func(s *Spec) { s.ExcludeCIDRs = []string{" 10.0.0.0/8 , ,10.0.0.0/8", ""} }),
			func(c Config) bool { return len(c.ExcludeCIDRs) == 1 }},
		{"port-range-forms", base(func(s *Spec) { s.ExcludePorts = []string{"22,8000-8100", "9000:9001"} }),
			func(c Config) bool {
				return slices.Equal(c.ExcludePorts, []PortRange{{22, 22}, {8000, 8100}, {9000, 9001}})
			}},
		{"gid", base(func(s *Spec) { s.ProxyGID = 0 }), func(c Config) bool { return c.HasProxyGID && c.ProxyGID == 0 }},
		{"no-gid", base(func(s *Spec) {}), func(c Config) bool { return !c.HasProxyGID }},
		{"interface-wildcard", base(func(s *Spec) { s.ExcludeInterfaces = []string{"veth+", "eth0.100"} }),
			func(c Config) bool { return len(c.ExcludeInterfaces) == 2 }},
		{"exclude-uids-deduplicated-without-the-proxy", base(func(s *Spec) { s.ExcludeUIDs = []string{"2102, 1337", "2102", "0"} }),
			func(c Config) bool { return slices.Equal(c.ExcludeUIDs, []uint32{2102, 0}) }},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.spec.Compile()
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("unexpected config %+v", c)
			}
		})
	}
	bad := []struct {
		name string
		spec Spec
		want string
	}{
		{"port-zero", base(func(s *Spec) { s.RedirectPort = 0 }), "redirect-port 0: must be 1-65535"},
		{"port-too-big", base(func(s *Spec) { s.RedirectPort = 70000 }), "redirect-port 70000"},
		{"negative-uid", base(func(s *Spec) { s.ProxyUID = -5 }), "proxy-uid -5: out of range"},
		{"bad-exclude-uid", base(func(s *Spec) { s.ExcludeUIDs = []string{"istio"} }), `exclude-uids "istio": not a UID`},
		{"exclude-uid-too-big", base(func(s *Spec) { s.ExcludeUIDs = []string{"4294967295"} }), "not a UID"},
		{"bad-cidr", base(func(s *Spec) { s.ExcludeCIDRs = []string{"10.0.0.0/33"} }), `exclude-cidrs "10.0.0.0/33": not a CIDR`},
		{"name-not-cidr", base(func(s *Spec) { s.IncludeCIDRs = []string{"example.com"} }), `include-cidrs "example.com": not a CIDR or IP address`},
		{"zone", base(func(s *Spec) { s.ExcludeCIDRs = []string{"fe80::1%eth0"} }), "zones are not allowed"},
		{"bad-port", base(func(s *Spec) { s.ExcludePorts = []string{"ssh"} }), `exclude-ports "ssh"`},
		{"backwards-range", base(func(s *Spec) { s.ExcludePorts = []string{"90-80"} }), "backwards"},
		{"port-zero-excluded", base(func(s *Spec) { s.ExcludePorts = []string{"0"} }), "must be 1-65535"},
		{"interface-with-space", base(func(s *Spec) { s.ExcludeInterfaces = []string{"eth 0"} }), "not an interface name"},
		{"interface-too-long", base(func(s *Spec) { s.ExcludeInterfaces = []string{"abcdefghijklmnop"} }), "not an interface name"},
		{"interface-quote", base(func(s *Spec) { s.ExcludeInterfaces = []string{`a"b`} }), "not an interface name"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.spec.Compile()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want containing %q", err, tc.want)
			}
		})
	}
}

func TestRedirected(t *testing.T) {
	c, err := Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: 15001, IPv6: true,
		ExcludeCIDRs: []string{"10.96.0.0/12", "fd00::/8"}, ExcludePorts: []string{"22"}}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	inc, _ := Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: 15001,
		IncludeCIDRs: []string{"203.0.113.0/24"}, ExcludeCIDRs: []string{"203.0.113.7"}}.Compile()
	for _, tc := range []struct {
		name string
		c    Config
		dst  string
		want bool
	}{
		{"outside", c, "192.0.2.1:443", true},
		{"excluded-cidr", c, "10.96.0.1:443", false},
		{"excluded-port", c, "192.0.2.1:22", false},
		{"loopback", c, "127.0.0.5:80", false},
		{"loopback-v6", c, "[::1]:80", false},
		{"v6-outside", c, "[2001:db8::1]:80", true},
		{"v6-excluded", c, "[fd00::1]:80", false},
		{"mapped-v4", c, "[::ffff:192.0.2.1]:80", true},
		{"included", inc, "203.0.113.1:80", true},
		{"included-but-excluded", inc, "203.0.113.7:80", false},
		{"not-included", inc, "192.0.2.1:80", false},
		{"v6-without-ipv6", inc, "[2001:db8::1]:80", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Redirected(netip.MustParseAddrPort(tc.dst)); got != tc.want {
				t.Fatalf("Redirected(%s) = %v", tc.dst, got)
			}
		})
	}
}

func TestDefaultProbeTargets(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		want []string
		err  string
	}{
		{"ipv4", Spec{RedirectPort: 1, ProxyGID: -1}, []string{"192.0.2.1:80"}, ""},
		{"dual", Spec{RedirectPort: 1, ProxyGID: -1, IPv6: true}, []string{"192.0.2.1:80", "[2001:db8::1]:80"}, ""},
		{"port-80-excluded", Spec{RedirectPort: 1, ProxyGID: -1, ExcludePorts: []string{"80"}}, []string{"192.0.2.1:443"}, ""},
		{"include", Spec{RedirectPort: 1, ProxyGID: -1, IncludeCIDRs: []string{"198.51.100.0/24"}}, []string{"198.51.100.1:80"}, ""},
		{"include-single", Spec{RedirectPort: 1, ProxyGID: -1, IncludeCIDRs: []string{"198.51.100.9"}}, []string{"198.51.100.9:80"}, ""},
		{"doc-range-excluded", Spec{RedirectPort: 1, ProxyGID: -1, ExcludeCIDRs: []string{"192.0.2.0/24"}}, nil, "pass --probe-addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.spec.Compile()
			if err != nil {
				t.Fatal(err)
			}
			got, err := DefaultProbeTargets(c)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, a := range got {
				s = append(s, a.String())
			}
			if !slices.Equal(s, tc.want) {
				t.Fatalf("got %v, want %v", s, tc.want)
			}
		})
	}
}

func FuzzCompile(f *testing.F) {
	for _, tc := range goldenCases {
		f.Add(strings.Join(tc.spec.ExcludeCIDRs, ","), strings.Join(tc.spec.IncludeCIDRs, ","),
			strings.Join(tc.spec.ExcludePorts, ","), strings.Join(tc.spec.ExcludeInterfaces, ","), tc.spec.RedirectPort)
	}
	f.Fuzz(func(t *testing.T, excl, incl, ports, ifaces string, port int) {
		c, err := Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: port, IPv6: true,
			ExcludeCIDRs: []string{excl}, IncludeCIDRs: []string{incl},
			ExcludePorts: []string{ports}, ExcludeInterfaces: []string{ifaces}}.Compile()
		if err != nil {
			return
		}
		// Whatever compiles renders as a restore text iptables-save reads back
		// as exactly egret's chains and rules.
		for _, fam := range c.Families() {
			rs := Build(c, fam)
			st, err := ParseSave(rs.RestoreText())
			if err != nil {
				t.Fatalf("own text unparsable: %v\n%s", err, rs.RestoreText())
			}
			want := expectedState(rs)
			if verify(want, st) != nil || spelling(want, st) != "" {
				t.Fatalf("round trip differs:\n%+v\n%+v", want, st)
			}
			for _, r := range rs.Rules {
				if strings.ContainsAny(r.Line(), "\n\r") {
					t.Fatalf("newline in rule %q", r.Line())
				}
			}
		}
	})
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	goldenfile.Check(t, path, []byte(got))
}

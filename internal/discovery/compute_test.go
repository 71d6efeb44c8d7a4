package discovery

import (
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	goldenfile "egret.io/egret/internal/testutil/golden"
)

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// coreDNS is the domain most test clusters report.
var coreDNS = Domain{Name: "cluster.local", Source: "configmap/kube-system/coredns"}

const base = "localhost,127.0.0.1,::1,[::1],kubernetes,kubernetes.default,kubernetes.default.svc,kubernetes.default.svc.cluster.local,.svc,.svc.cluster.local,.cluster.local"

func TestCompute(t *testing.T) {
	tests := []struct {
		name     string
		in       Inputs
		opts     Options
		want     string
		warnings int
	}{
		{
			name:     "empty-cluster-warns",
			opts:     Options{MetadataAddresses: []string{}},
			want:     base,
			warnings: 3, // no domain found, no Service range, no Pod range
		},
		{
			name: "domain-from-the-cluster",
			in: Inputs{ServiceCIDRs: map[string][]netip.Prefix{"kubernetes": pfx("10.96.0.0/12")}, NodePodCIDRs: map[string][]netip.Prefix{"n": pfx("10.244.0.0/24")},
				ClusterDomain: Domain{Name: "k8s.corp", Source: "kubelet/n"}, DomainWarnings: []string{"the kubelet's cluster domain k8s.corp (kubelet/n) is not CoreDNS's ..."}},
			opts:     Options{MetadataAddresses: []string{}},
			want:     strings.ReplaceAll(base, "cluster.local", "k8s.corp") + ",10.96.0.0/12,10.244.0.0/24",
			warnings: 1,
		},
		{
			name: "flag-wins-over-the-cluster",
			in: Inputs{ServiceCIDRs: map[string][]netip.Prefix{"kubernetes": pfx("10.96.0.0/12")}, NodePodCIDRs: map[string][]netip.Prefix{"n": pfx("10.244.0.0/24")},
				ClusterDomain: Domain{Name: "k8s.corp", Source: "kubelet/n"}, DomainWarnings: []string{"disagree"}},
			opts: Options{ClusterDomain: "cluster.local", MetadataAddresses: []string{}},
			want: base + ",10.96.0.0/12,10.244.0.0/24",
		},
		{
			name: "node-addresses",
			in: Inputs{ServiceCIDRs: map[string][]netip.Prefix{"kubernetes": pfx("10.96.0.0/12")}, NodePodCIDRs: map[string][]netip.Prefix{"n1": pfx("10.244.0.0/24")},
				NodeAddrs: map[string][]netip.Addr{
					"n1": addrs("192.168.10.4", "fd00:1::4"), "n2": addrs("192.168.10.5"), "n3": addrs("192.168.10.6", "192.168.10.7"),
					"n4": addrs("172.18.0.2"), // inside --node-cidr
				}},
			opts: Options{MetadataAddresses: []string{}, NodeCIDRs: pfx("172.18.0.0/16")},
			want: base + ",10.96.0.0/12,10.244.0.0/24,172.18.0.0/16,192.168.10.4,192.168.10.5,192.168.10.6,192.168.10.7,fd00:1::4,[fd00:1::4]",
		},
		{
			name: "many-node-addresses-aggregated",
			in: Inputs{ServiceCIDRs: map[string][]netip.Prefix{"kubernetes": pfx("10.96.0.0/12")}, NodePodCIDRs: map[string][]netip.Prefix{"n1": pfx("10.244.0.0/24")},
				NodeAddrs: map[string][]netip.Addr{"n1": addrs("192.168.10.4"), "n2": addrs("192.168.10.5"), "n3": addrs("192.168.10.6", "192.168.10.7"), "n4": addrs("10.9.0.1")}},
			opts:     Options{MetadataAddresses: []string{}, MaxNodeEntries: 2},
			want:     base + ",10.96.0.0/12,10.244.0.0/24,10.9.0.1,192.168.10.4/30",
			warnings: 1,
		},
		{
			name: "too-many-node-addresses-covered-by-24s",
			in: Inputs{ServiceCIDRs: map[string][]netip.Prefix{"kubernetes": pfx("10.96.0.0/12")}, NodePodCIDRs: map[string][]netip.Prefix{"n1": pfx("10.244.0.0/24")},
				NodeAddrs: map[string][]netip.Addr{"n1": addrs("192.168.10.4"), "n2": addrs("192.168.10.9"), "n3": addrs("192.168.11.200"), "n4": addrs("10.9.0.1", "fd00::1")}},
			opts:     Options{MetadataAddresses: []string{}, MaxNodeEntries: 3},
			want:     base + ",10.96.0.0/12,10.244.0.0/24,10.9.0.0/24,192.168.10.0/23,fd00::/64",
			warnings: 1,
		},
	}
	tests = append(tests, []struct {
		name     string
		in       Inputs
		opts     Options
		want     string
		warnings int
	}{
		{
			name: "dual-stack-cluster",
			in: Inputs{
				ServiceCIDRs: map[string][]netip.Prefix{"kubernetes": pfx("10.96.0.0/12", "fd00:10:96::/112")},
				NodePodCIDRs: map[string][]netip.Prefix{
					"node-b": pfx("10.244.1.0/24", "fd00:10:244:1::/64"),
					"node-a": pfx("10.244.0.0/24", "fd00:10:244::/64"),
				},
				KubernetesServiceIPs: addrs("10.96.0.1"),
				APIServerAddrs:       map[string][]netip.Addr{"kubernetes": addrs("172.18.0.3")},
			},
			want: base + ",10.96.0.0/12,fd00:10:96::/112,10.96.0.1,172.18.0.3,10.244.0.0/23,fd00:10:244::/63,169.254.169.254,fd00:ec2::254,[fd00:ec2::254]",
		},
		{
			name: "flag-fallbacks-and-other-domain",
			opts: Options{ClusterDomain: "corp.example.", ServiceCIDRs: pfx("10.0.0.0/16"), PodCIDRs: pfx("10.1.0.0/16"), MetadataAddresses: []string{"169.254.169.254"}},
			want: strings.ReplaceAll(base, "cluster.local", "corp.example") + ",10.0.0.0/16,10.1.0.0/16,169.254.169.254",
		},
		{
			name: "servicecidr-objects-win-over-flag",
			in:   Inputs{ServiceCIDRs: map[string][]netip.Prefix{"extra": pfx("10.100.0.0/16"), "kubernetes": pfx("10.96.0.0/16")}},
			opts: Options{ServiceCIDRs: pfx("10.0.0.0/8"), PodCIDRs: pfx("10.244.0.0/16"), MetadataAddresses: []string{}},
			want: base + ",10.100.0.0/16,10.96.0.0/16,10.244.0.0/16",
		},
		{
			name: "duplicates-merge-and-additions-keep-order",
			in: Inputs{
				ServiceCIDRs:   map[string][]netip.Prefix{"kubernetes": pfx("10.96.0.0/16")},
				NodePodCIDRs:   map[string][]netip.Prefix{"n1": pfx("10.244.0.0/24"), "n2": pfx("10.244.0.0/24")},
				APIServerAddrs: map[string][]netip.Addr{"kubernetes": addrs("127.0.0.1")},
				Additions:      []Addition{{"registry.corp", "cm"}, {".internal", "cm"}, {"localhost", "cm"}, {"REGISTRY.corp", "ns"}},
			},
			opts: Options{MetadataAddresses: []string{}},
			want: base + ",10.96.0.0/16,10.244.0.0/24,registry.corp,.internal",
		},
	}...)
	// Cases that do not say so find the domain in the cluster.
	for i := range tests {
		if tests[i].in.ClusterDomain.Name == "" && tests[i].name != "empty-cluster-warns" {
			tests[i].in.ClusterDomain = coreDNS
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Compute(tt.in, tt.opts)
			if got := r.Value(); got != tt.want {
				t.Errorf("value\n got %s\nwant %s", got, tt.want)
			}
			if len(r.Warnings) != tt.warnings {
				t.Errorf("warnings = %q, want %d", r.Warnings, tt.warnings)
			}
			// Same inputs, same output: maps must not leak their order.
			for range 5 {
				if again := Compute(tt.in, tt.opts).Value(); again != r.Value() {
					t.Fatalf("not deterministic: %s", again)
				}
			}
		})
	}
}

func TestComputeSources(t *testing.T) {
	in := Inputs{
		ServiceCIDRs:   map[string][]netip.Prefix{"kubernetes": pfx("10.96.0.0/16")},
		NodePodCIDRs:   map[string][]netip.Prefix{"node-a": pfx("10.244.0.0/24"), "node-b": pfx("10.244.1.0/24")},
		APIServerAddrs: map[string][]netip.Addr{"kubernetes": addrs("127.0.0.1", "10.0.0.5")},
		NodeAddrs:      map[string][]netip.Addr{"node-a": addrs("172.18.0.2"), "node-b": addrs("172.18.0.3", "fd00:18::3")},
		Additions:      []Addition{{"registry.corp", "configmap/egret-system/egret-noproxy"}},
		ClusterDomain:  coreDNS,
	}
	r := Compute(in, Options{})
	golden(t, "explain.golden.json", r.Explain())
	data := ConfigMapData(r)
	if data["NO_PROXY"] != data["no_proxy"] || data["NO_PROXY"] != r.Value() {
		t.Errorf("configmap data cases differ: %v", data)
	}
	for _, e := range r.Entries {
		if e.Value == "127.0.0.1" && !slices.Equal(e.Sources, []string{"default", "endpointslice/default/kubernetes"}) {
			t.Errorf("127.0.0.1 sources = %v", e.Sources)
		}
	}
	got := r.Prefixes()
	if !slices.Contains(got, netip.MustParsePrefix("10.244.0.0/23")) || !slices.Contains(got, netip.MustParsePrefix("10.0.0.5/32")) {
		t.Errorf("prefixes = %v", got)
	}
}

func TestSourcesAreCapped(t *testing.T) {
	in := Inputs{NodePodCIDRs: map[string][]netip.Prefix{}}
	for i := range 40 {
		in.NodePodCIDRs[string(rune('a'+i%26))+strings.Repeat("x", i/26)] = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)}
	}
	r := Compute(in, Options{})
	for _, e := range r.Entries {
		if e.Kind == KindPodCIDR {
			if len(e.Sources)+e.MoreSources == 0 || len(e.Sources) > maxSources {
				t.Errorf("%s: %d sources, %d more", e.Value, len(e.Sources), e.MoreSources)
			}
		}
	}
	// 40 node /24s from 10.244.0.0: a /19 (32 nodes) and a /21 (8 nodes).
	if !strings.Contains(r.Value(), ",10.244.0.0/19,10.244.32.0/21,") {
		t.Errorf("pod ranges not aggregated: %s", r.Value())
	}
	for _, e := range r.Entries {
		if e.Value == "10.244.0.0/19" && (len(e.Sources) != maxSources || e.MoreSources != 32-maxSources) {
			t.Errorf("/19: %d sources + %d more, want %d + %d", len(e.Sources), e.MoreSources, maxSources, 32-maxSources)
		}
	}
}

func TestWithAdditions(t *testing.T) {
	r := Compute(Inputs{}, Options{MetadataAddresses: []string{}})
	got := r.With([]Addition{{".svc", "namespace/x"}, {"db.corp", "namespace/x"}})
	if got.Value() != base+",db.corp" {
		t.Errorf("with = %s", got.Value())
	}
	if r.Value() != base {
		t.Errorf("With changed its receiver: %s", r.Value())
	}
	var nilResult *Result
	if nilResult.With(nil).Value() != "" {
		t.Error("nil With not empty")
	}
}

func TestParseAdditions(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{"commas-and-lines", "a.corp, b.corp\n.internal # comment\n\n10.0.0.0/8", []string{"a.corp", "b.corp", ".internal", "10.0.0.0/8"}, ""},
		{"ipv6-and-wildcard", "[fd00::1],*.corp,fd00::/8", []string{"[fd00::1]", "*.corp", "fd00::/8"}, ""},
		{"empty", "  \n# only a comment", nil, ""},
		{"bad-character-reported", "good.corp,bad;corp", []string{"good.corp"}, `"bad;corp": character ';'`},
		{"credentials-refused", "user@host", nil, "character '@'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adds, err := ParseAdditions(tt.in, "src")
			var got []string
			for _, a := range adds {
				got = append(got, a.Value)
				if a.Source != "src" {
					t.Errorf("source %q", a.Source)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"zero-is-valid", Options{}, ""},
		{"bad-domain", Options{ClusterDomain: "a b"}, "cluster domain"},
		{"bad-metadata", Options{MetadataAddresses: []string{"metadata.google"}}, "metadata address"},
		{"bad-additions-name", Options{Additions: "noslash"}, "namespace/name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

var aggregateTests = []struct {
	name string
	in   []string
	want []string
}{
	{"siblings-merge", []string{"10.0.1.0/24", "10.0.0.0/24"}, []string{"10.0.0.0/23"}},
	{"chain-merges", []string{"10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"}, []string{"10.0.0.0/22"}},
	{"non-siblings-stay", []string{"10.0.1.0/24", "10.0.2.0/24"}, []string{"10.0.1.0/24", "10.0.2.0/24"}},
	{"contained-dropped", []string{"10.0.0.0/16", "10.0.5.0/24", "10.0.0.0/16"}, []string{"10.0.0.0/16"}},
	{"mixed-families", []string{"fd00::/64", "10.0.0.0/24", "fd00:0:0:1::/64"}, []string{"10.0.0.0/24", "fd00::/63"}},
	{"host-bits-masked", []string{"10.0.0.7/24"}, []string{"10.0.0.0/24"}},
}

func TestAggregate(t *testing.T) {
	for _, tt := range aggregateTests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range Aggregate(pfx(tt.in...)) {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// covered is the naive model: does any prefix hold a?
func covered(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// FuzzAggregate checks Aggregate against the naive model on a small address
// space (10.0.0.0/26): same addresses covered, never more prefixes.
func FuzzAggregate(f *testing.F) {
	for _, tt := range aggregateTests {
		var b []byte
		for _, p := range pfx(tt.in...) {
			if p.Addr().Is4() {
				b = append(b, p.Addr().As4()[3], byte(p.Bits()))
			}
		}
		f.Add(b)
	}
	f.Add([]byte{0, 26, 1, 32, 7, 30})
	f.Fuzz(func(t *testing.T, data []byte) {
		var in []netip.Prefix
		for i := 0; i+1 < len(data) && len(in) < 16; i += 2 {
			bits := 26 + int(data[i+1])%7
			in = append(in, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, data[i] % 64}), bits).Masked())
		}
		out := Aggregate(in)
		if len(out) > len(in) {
			t.Fatalf("%v -> %v: more prefixes", in, out)
		}
		for i := range 64 {
			a := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
			if covered(in, a) != covered(out, a) {
				t.Fatalf("%v -> %v: %s differs", in, out, a)
			}
		}
		for i := 1; i < len(out); i++ {
			if out[i-1].Overlaps(out[i]) {
				t.Fatalf("%v: overlapping output", out)
			}
		}
	})
}

func FuzzParseAdditions(f *testing.F) {
	f.Add("a.corp, b.corp\n.internal # c")
	f.Add("bad;x,[::1],*.x")
	f.Fuzz(func(t *testing.T, s string) {
		adds, _ := ParseAdditions(s, "fuzz")
		for _, a := range adds {
			if a.Value == "" || strings.ContainsAny(a.Value, ", \n#") {
				t.Fatalf("bad entry %q from %q", a.Value, s)
			}
		}
	})
}

func TestAggregateRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var in []netip.Prefix
		for range rng.IntN(10) {
			in = append(in, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(64))}), 26+rng.IntN(7)).Masked())
		}
		out := Aggregate(in)
		for i := range 64 {
			a := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
			if covered(in, a) != covered(out, a) {
				t.Fatalf("%v -> %v: %s differs", in, out, a)
			}
		}
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

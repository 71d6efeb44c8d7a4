package route

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeResolver answers from a map and counts lookups.
type fakeResolver struct {
	m     map[string][]netip.Addr
	calls atomic.Int32
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.calls.Add(1)
	if a, ok := f.m[host]; ok {
		return append([]netip.Addr(nil), a...), nil
	}
	return nil, errors.New("no such host")
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func sfx(s string) Suffix {
	x, err := ParseSuffix(s)
	if err != nil {
		panic(err)
	}
	return x
}

// table is the rule set the tests route against: a sidecar's typical
// configuration plus one of each matcher.
func table(t testing.TB) *Table {
	t.Helper()
	tb, err := New([]Rule{
		{Match: Match{Hosts: []string{"blocked.example.com"}}, Action: Deny, Source: "deny hosts"},
		{Match: Match{Hosts: []string{"api.partner.com"}, Ports: []uint16{443}}, Action: Upstream, Pool: "critical", Source: "partner 443"},
		{Match: Match{Suffixes: []Suffix{sfx(".svc"), sfx(".cluster.local"), sfx("corp.internal")}}, Action: Direct, Source: "DIRECT_SUFFIXES"},
		{Match: Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}}, Action: Direct, Source: "DIRECT_CIDRS"},
		{Match: Match{Ports: []uint16{25}}, Action: Deny, Source: "no smtp"},
		{Match: Match{Hosts: []string{"192.0.2.7"}}, Action: Deny, Source: "ip host"},
	}, Upstream, "")
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

var decideTests = []struct {
	name, dest string
	action     Action
	reason     Reason
	entry      string
	pool       string
}{
	{"loopback-ip", "127.0.0.5:80", Direct, ReasonLoopback, "", ""},
	{"loopback-v6", "[::1]:443", Direct, ReasonLoopback, "", ""},
	{"localhost-name", "localhost:8080", Direct, ReasonLoopback, "", ""},
	{"dot-localhost", "app.localhost:80", Direct, ReasonLoopback, "", ""},
	{"exact-host-deny", "blocked.example.com:443", Deny, ReasonHost, "blocked.example.com", ""},
	{"exact-host-is-not-a-suffix", "x.blocked.example.com:443", Upstream, ReasonDefault, "", ""},
	{"host-and-port", "api.partner.com:443", Upstream, ReasonHost, "api.partner.com", "critical"},
	{"host-wrong-port", "api.partner.com:8443", Upstream, ReasonDefault, "", ""},
	{"suffix-subdomain", "payments.default.svc:8080", Direct, ReasonSuffix, ".svc", ""},
	{"suffix-not-apex", "svc:80", Upstream, ReasonDefault, "", ""},
	{"suffix-fqdn", "api.ns.svc.cluster.local:443", Direct, ReasonSuffix, ".cluster.local", ""},
	{"suffix-cluster-local", "x.pod.cluster.local:443", Direct, ReasonSuffix, ".cluster.local", ""},
	{"bare-suffix-apex", "corp.internal:443", Direct, ReasonSuffix, "corp.internal", ""},
	{"bare-suffix-sub", "git.corp.internal:443", Direct, ReasonSuffix, "corp.internal", ""},
	{"label-boundary", "notcorp.internal:443", Upstream, ReasonDefault, "", ""},
	{"trailing-dot-and-case", "Payments.Default.SVC.:80", Direct, ReasonSuffix, ".svc", ""},
	{"cidr-literal", "10.1.2.3:443", Direct, ReasonCIDR, "10.0.0.0/8", ""},
	{"cidr-v6-literal", "[fd00::1]:443", Direct, ReasonCIDR, "fd00::/8", ""},
	{"cidr-v4-mapped", "[::ffff:10.1.2.3]:443", Direct, ReasonCIDR, "10.0.0.0/8", ""},
	{"resolved-into-cidr", "db.internal.example:5432", Direct, ReasonResolved, "10.0.0.0/8 (10.9.8.7)", ""},
	{"resolved-outside", "www.example.org:443", Upstream, ReasonDefault, "", ""},
	{"unresolvable", "nowhere.example:443", Upstream, ReasonDefault, "", ""},
	{"port-only-rule", "mail.example.org:25", Deny, ReasonPort, "", ""},
	{"ip-as-host", "192.0.2.7:80", Deny, ReasonCIDR, "192.0.2.7/32", ""},
	{"names-never-match-ip-rules", "192.0.2.8:80", Upstream, ReasonDefault, "", ""},
}

func TestDecide(t *testing.T) {
	tb := table(t)
	res := &fakeResolver{m: map[string][]netip.Addr{
		"db.internal.example": addrs("10.9.8.7"),
		"www.example.org":     addrs("93.184.216.34", "2606:2800:220:1::1"),
	}}
	for _, tc := range decideTests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseDest(tc.dest, 0)
			if err != nil {
				t.Fatal(err)
			}
			got := tb.Decide(context.Background(), d, res)
			if got.Action != tc.action || got.Reason != tc.reason || got.Entry != tc.entry || got.Pool != tc.pool {
				t.Errorf("Decide(%s) = %v/%v entry %q pool %q; want %v/%v entry %q pool %q",
					tc.dest, got.Action, got.Reason, got.Entry, got.Pool, tc.action, tc.reason, tc.entry, tc.pool)
			}
		})
	}
}

func TestDecideResolvesOnlyWhenACIDRCouldDecide(t *testing.T) {
	tb := table(t)
	res := &fakeResolver{m: map[string][]netip.Addr{"db.internal.example": addrs("10.9.8.7")}}
	for _, dest := range []string{"payments.default.svc:80", "blocked.example.com:443", "10.1.2.3:80", "localhost:80"} {
		d, _ := ParseDest(dest, 0)
		tb.Decide(context.Background(), d, res)
	}
	if n := res.calls.Load(); n != 0 {
		t.Errorf("%d lookups for destinations decided by name, IP or port; want 0", n)
	}
	d, _ := ParseDest("db.internal.example:5432", 0)
	dec := tb.Decide(context.Background(), d, res)
	if n := res.calls.Load(); n != 1 {
		t.Errorf("%d lookups, want exactly 1", n)
	}
	if len(dec.Addrs) != 1 || dec.Addrs[0] != netip.MustParseAddr("10.9.8.7") {
		t.Errorf("decision addresses = %v, want the resolved 10.9.8.7 for the dial", dec.Addrs)
	}
	d, _ = ParseDest("nowhere.example:443", 0)
	if dec := tb.Decide(context.Background(), d, res); dec.ResolveErr == nil || dec.Action != Upstream {
		t.Errorf("unresolvable name: %+v; want the default route and the lookup error kept", dec)
	}
}

// TestDecideApprovesOnlyAddressesInside: a CIDR rule that lets a name
// through by its addresses approves only those inside its ranges (issue
// 21, finding 2); a deny CIDR refuses the name when any address is inside;
// other rules approve the whole answer.
func TestDecideApprovesOnlyAddressesInside(t *testing.T) {
	tb, err := New([]Rule{
		{Match: Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}, Action: Deny, Source: "DENY_CIDRS"},
		{Match: Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}, Action: Direct, Source: "DIRECT_CIDRS"},
	}, Upstream, "")
	if err != nil {
		t.Fatal(err)
	}
	res := &fakeResolver{m: map[string][]netip.Addr{
		"mixed.test":  addrs("198.51.100.1", "203.0.113.5", "::ffff:203.0.113.6"),
		"denied.test": addrs("203.0.113.5", "192.0.2.9"),
		"dns64.test":  addrs("64:ff9b::c000:209"),
		"other.test":  addrs("198.51.100.1", "198.51.100.2"),
	}}
	for _, tt := range []struct {
		dest   string
		action Action
		entry  string
		addrs  string
	}{
		{"mixed.test:443", Direct, "203.0.113.0/24 (203.0.113.5)", "203.0.113.5 203.0.113.6"},
		{"denied.test:443", Deny, "192.0.2.0/24 (192.0.2.9)", "203.0.113.5 192.0.2.9"},
		{"dns64.test:443", Deny, "192.0.2.0/24 (64:ff9b::c000:209, NAT64 of 192.0.2.9)", "64:ff9b::c000:209"},
		{"other.test:443", Upstream, "", "198.51.100.1 198.51.100.2"},
		{"[64:ff9b::c000:209]:443", Deny, "192.0.2.0/24 (NAT64 of 192.0.2.9)", ""},
		{"[2002:c000:209::1]:443", Deny, "192.0.2.0/24 (6to4 of 192.0.2.9)", ""},
		{"[64:ff9b::cb00:7105]:443", Upstream, "", ""}, // an allow opens the address as dialled
	} {
		d, err := ParseDest(tt.dest, 0)
		if err != nil {
			t.Fatal(err)
		}
		dec := tb.Decide(context.Background(), d, res)
		var got []string
		for _, a := range dec.Addrs {
			got = append(got, a.String())
		}
		if dec.Action != tt.action || dec.Entry != tt.entry || strings.Join(got, " ") != tt.addrs {
			t.Errorf("Decide(%s) = %v entry %q addrs %v; want %v entry %q addrs %q", tt.dest, dec.Action, dec.Entry, got, tt.action, tt.entry, tt.addrs)
		}
	}
}

func TestDecideWithoutResolver(t *testing.T) {
	d, _ := ParseDest("db.internal.example:5432", 0)
	if got := table(t).Decide(context.Background(), d, nil); got.Reason != ReasonDefault {
		t.Errorf("without a resolver a name matched %v", got.Reason)
	}
}

func TestFirstMatchWins(t *testing.T) {
	tb, err := New([]Rule{
		{Match: Match{Suffixes: []Suffix{sfx(".example.com")}}, Action: Direct, Source: "first"},
		{Match: Match{Hosts: []string{"a.example.com"}}, Action: Deny, Source: "second"},
		{Match: Match{Any: true}, Action: Deny, Source: "everything"},
	}, Direct, "")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := ParseDest("a.example.com:443", 0)
	if got := tb.Decide(context.Background(), d, nil); got.Source != "first" || got.Rule != 0 {
		t.Errorf("got rule %d (%s), want the first", got.Rule, got.Source)
	}
	d, _ = ParseDest("other.org:443", 0)
	if got := tb.Decide(context.Background(), d, nil); got.Reason != ReasonAny || got.Action != Deny {
		t.Errorf("got %v %v, want the any rule", got.Action, got.Reason)
	}
}

func TestNewRejects(t *testing.T) {
	for name, rules := range map[string][]Rule{
		"no-action":     {{Match: Match{Hosts: []string{"a"}}}},
		"matches-none":  {{Action: Direct, Source: "x"}},
		"bad-host":      {{Match: Match{Hosts: []string{"a b"}}, Action: Direct}},
		"invalid-cidr":  {{Match: Match{CIDRs: []netip.Prefix{{}}}, Action: Direct}},
		"bad-action-99": {{Match: Match{Hosts: []string{"a"}}, Action: 99}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(rules, Direct, ""); err == nil {
				t.Error("accepted")
			}
		})
	}
	if _, err := New(nil, 0, ""); err == nil {
		t.Error("accepted a default route without an action")
	}
}

func TestParseDest(t *testing.T) {
	for _, tc := range []struct {
		in      string
		defPort uint16
		host    string
		port    uint16
		err     string
	}{
		{"example.com:443", 0, "example.com", 443, ""},
		{"EXAMPLE.com.:80", 0, "example.com", 80, ""},
		{"example.com", 80, "example.com", 80, ""},
		{"example.com", 0, "", 0, "want host:port"},
		{"[2001:db8::1]:443", 0, "2001:db8::1", 443, ""},
		{"[::ffff:1.2.3.4]:443", 0, "1.2.3.4", 443, ""},
		{"[fe80::1%eth0]:443", 0, "", 0, "zoned"},
		{"a..b:1", 0, "", 0, "empty label"},
		{"a/b:1", 0, "", 0, "invalid character"},
		{"example.com:0", 0, "", 0, "bad port"},
		{"example.com:65536", 0, "", 0, "bad port"},
		{":443", 0, "", 0, "empty host"},
		{"under_score.svc:53", 0, "under_score.svc", 53, ""},
		{strings.Repeat("a.", 130) + "com:1", 0, "", 0, "too long"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d, err := ParseDest(tc.in, tc.defPort)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || d.Host != tc.host || d.Port != tc.port {
				t.Errorf("got %+v, %v; want %s:%d", d, err, tc.host, tc.port)
			}
		})
	}
}

func TestParseAction(t *testing.T) {
	for in, want := range map[string]struct {
		a    Action
		pool string
		ok   bool
	}{
		"direct": {Direct, "", true}, " Deny ": {Deny, "", true}, "upstream": {Upstream, "", true},
		"upstream:critical": {Upstream, "critical", true}, "upstream:": {0, "", false}, "proxy": {0, "", false},
	} {
		a, pool, err := ParseAction(in)
		if (err == nil) != want.ok || a != want.a || pool != want.pool {
			t.Errorf("ParseAction(%q) = %v %q %v", in, a, pool, err)
		}
	}
	if s := Action(42).String(); s != "unknown(42)" {
		t.Errorf("String of a bad action = %q", s)
	}
}

func FuzzParseDest(f *testing.F) {
	for _, tc := range decideTests {
		f.Add(tc.dest)
	}
	f.Add("[::1%lo]:1")
	f.Add("\x00:80")
	tb := table(f)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDest(s, 0)
		if err != nil {
			return
		}
		if d.Port == 0 || d.Host == "" {
			t.Fatalf("ParseDest(%q) = %+v without error", s, d)
		}
		// A parsed destination round-trips and routes without panicking.
		d2, err := ParseDest(d.String(), 0)
		if err != nil || d2 != d {
			t.Fatalf("round trip of %q: %+v → %q → %+v, %v", s, d, d.String(), d2, err)
		}
		tb.Decide(context.Background(), d, nil)
	})
}

func BenchmarkDecide(b *testing.B) {
	tb := table(b)
	res := &fakeResolver{m: map[string][]netip.Addr{"db.internal.example": addrs("10.9.8.7")}}
	for _, tc := range []string{"payments.default.svc:8080", "10.1.2.3:443", "www.example.org:443"} {
		d, _ := ParseDest(tc, 0)
		b.Run(tc, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tb.Decide(context.Background(), d, res)
			}
		})
	}
}

// TestDenyCIDRsEverySpelling: a deny CIDR refuses every IPv6 spelling of
// its IPv4 addresses, as a literal and as a name's answer (issue 21,
// finding 5); an allow opens the address as dialled only.
func TestDenyCIDRsEverySpelling(t *testing.T) {
	tb, err := New([]Rule{
		{Match: Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}, Action: Deny, Source: "DENY_CIDRS"},
		{Match: Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}, Action: Direct, Source: "DIRECT_CIDRS"},
	}, Upstream, "")
	if err != nil {
		t.Fatal(err)
	}
	res := &fakeResolver{m: map[string][]netip.Addr{"dns64.test": addrs("64:ff9b::c000:209")}}
	for _, tt := range []struct {
		dest   string
		action Action
		entry  string
	}{
		{"192.0.2.9:443", Deny, "192.0.2.0/24"},
		{"[::ffff:192.0.2.9]:443", Deny, "192.0.2.0/24"},
		{"[64:ff9b::c000:209]:443", Deny, "192.0.2.0/24 (NAT64 of 192.0.2.9)"},
		{"[64:ff9b::192.0.2.9]:443", Deny, "192.0.2.0/24 (NAT64 of 192.0.2.9)"},
		{"[64:ff9b:1::c000:209]:443", Deny, "192.0.2.0/24 (local-use NAT64 of 192.0.2.9)"},
		{"[2002:c000:209::1]:443", Deny, "192.0.2.0/24 (6to4 of 192.0.2.9)"},
		{"[2001:0:c000:209::ffff]:443", Deny, "192.0.2.0/24 (Teredo server of 192.0.2.9)"},
		{"[::c000:209]:443", Deny, "192.0.2.0/24 (IPv4-compatible of 192.0.2.9)"},
		{"dns64.test:443", Deny, "192.0.2.0/24 (64:ff9b::c000:209, NAT64 of 192.0.2.9)"},
		{"[::ffff:198.51.100.7]:443", Direct, "198.51.100.0/24"},
		{"[64:ff9b::c633:6407]:443", Upstream, ""}, // an allow opens the address as dialled
	} {
		d, err := ParseDest(tt.dest, 0)
		if err != nil {
			t.Fatal(err)
		}
		if dec := tb.Decide(context.Background(), d, res); dec.Action != tt.action || dec.Entry != tt.entry {
			t.Errorf("Decide(%s) = %v entry %q; want %v entry %q", tt.dest, dec.Action, dec.Entry, tt.action, tt.entry)
		}
	}
}

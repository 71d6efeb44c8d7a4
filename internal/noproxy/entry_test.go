package noproxy

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http/httpproxy"
)

var parseTests = []struct {
	name  string
	value string
	want  []Entry
	bad   []string // entries reported as errors
}{
	{name: "empty", value: ""},
	{name: "only-commas-and-blanks", value: " , ,\t,"},
	{name: "star", value: "*", want: []Entry{{Raw: "*", Kind: KindAll}}},
	{name: "star-padded-in-list", value: "foo.com, * ", want: []Entry{
		{Raw: "foo.com", Kind: KindDomain, Domain: "foo.com", Apex: true},
		{Raw: "*", Kind: KindAll},
	}},
	{name: "bare-domain", value: "Example.COM", want: []Entry{{Raw: "Example.COM", Kind: KindDomain, Domain: "example.com", Apex: true}}},
	{name: "leading-dot", value: ".svc", want: []Entry{{Raw: ".svc", Kind: KindDomain, Domain: "svc"}}},
	{name: "star-dot", value: "*.example.com", want: []Entry{{Raw: "*.example.com", Kind: KindDomain, Domain: "example.com"}}},
	{name: "trailing-dot", value: "example.com.", want: []Entry{{Raw: "example.com.", Kind: KindDomain, Domain: "example.com", Apex: true, Rooted: true}}},
	{name: "domain-port", value: "example.com:8080", want: []Entry{{Raw: "example.com:8080", Kind: KindDomain, Domain: "example.com", Apex: true, Port: 8080}}},
	{name: "leading-dot-port", value: ".example.com:443", want: []Entry{{Raw: ".example.com:443", Kind: KindDomain, Domain: "example.com", Port: 443}}},
	{name: "domain-empty-port", value: "example.com:", want: []Entry{{Raw: "example.com:", Kind: KindDomain, Domain: "example.com", Apex: true}}},
	{name: "idn", value: "Bücher.example", want: []Entry{{Raw: "Bücher.example", Kind: KindDomain, Domain: "xn--bcher-kva.example", Apex: true}}},
	{name: "underscore", value: "_srv.example.com", want: []Entry{{Raw: "_srv.example.com", Kind: KindDomain, Domain: "_srv.example.com", Apex: true}}},
	{name: "numeric-suffix-is-a-domain", value: "2.3", want: []Entry{{Raw: "2.3", Kind: KindDomain, Domain: "2.3", Apex: true}}},
	{name: "ipv4", value: "10.1.2.3", want: []Entry{{Raw: "10.1.2.3", Kind: KindIP, Prefix: netip.MustParsePrefix("10.1.2.3/32")}}},
	{name: "ipv4-port", value: "10.1.2.3:8080", want: []Entry{{Raw: "10.1.2.3:8080", Kind: KindIP, Prefix: netip.MustParsePrefix("10.1.2.3/32"), Port: 8080}}},
	{name: "ipv6", value: "FD00::1", want: []Entry{{Raw: "FD00::1", Kind: KindIP, Prefix: netip.MustParsePrefix("fd00::1/128")}}},
	{name: "ipv6-bracket-port", value: "[fd00::1]:443", want: []Entry{{Raw: "[fd00::1]:443", Kind: KindIP, Prefix: netip.MustParsePrefix("fd00::1/128"), Port: 443}}},
	{name: "ipv6-trailing-group-not-a-port", value: "fd00::1:80", want: []Entry{{Raw: "fd00::1:80", Kind: KindIP, Prefix: netip.MustParsePrefix("fd00::1:80/128")}}},
	{name: "cidr4", value: "10.0.0.0/8", want: []Entry{{Raw: "10.0.0.0/8", Kind: KindCIDR, Prefix: netip.MustParsePrefix("10.0.0.0/8")}}},
	{name: "cidr4-host-bits-masked", value: "10.1.2.3/8", want: []Entry{{Raw: "10.1.2.3/8", Kind: KindCIDR, Prefix: netip.MustParsePrefix("10.0.0.0/8")}}},
	{name: "cidr4-zero", value: "0.0.0.0/0", want: []Entry{{Raw: "0.0.0.0/0", Kind: KindCIDR, Prefix: netip.MustParsePrefix("0.0.0.0/0")}}},
	{name: "ipv4-mapped", value: "::ffff:10.1.2.3", want: []Entry{{Raw: "::ffff:10.1.2.3", Kind: KindIP, Prefix: netip.MustParsePrefix("10.1.2.3/32")}}},
	{name: "cidr-mapped", value: "::ffff:10.0.0.0/104", want: []Entry{{Raw: "::ffff:10.0.0.0/104", Kind: KindCIDR, Prefix: netip.MustParsePrefix("10.0.0.0/8")}}},
	{name: "cidr6", value: "fd00::/8", want: []Entry{{Raw: "fd00::/8", Kind: KindCIDR, Prefix: netip.MustParsePrefix("fd00::/8")}}},
	{name: "mixed-list", value: "localhost, 127.0.0.1,,::1 ,.svc", want: []Entry{
		{Raw: "localhost", Kind: KindDomain, Domain: "localhost", Apex: true},
		{Raw: "127.0.0.1", Kind: KindIP, Prefix: netip.MustParsePrefix("127.0.0.1/32")},
		{Raw: "::1", Kind: KindIP, Prefix: netip.MustParsePrefix("::1/128")},
		{Raw: ".svc", Kind: KindDomain, Domain: "svc"},
	}},
	{name: "bad-entries-keep-good-ones", value: "a.com,10.0.0.0/33,[fd00::1],*x.com,www.*.com,10.*,http://x.com,b.com:99999,:80,fe80::1%eth0,a..b,.,*.,1.2.3.0-1.2.3.9,a b",
		want: []Entry{{Raw: "a.com", Kind: KindDomain, Domain: "a.com", Apex: true}},
		bad:  []string{"10.0.0.0/33", "[fd00::1]", "*x.com", "www.*.com", "10.*", "http://x.com", "b.com:99999", ":80", "fe80::1%eth0", "a..b", ".", "*.", "1.2.3.0-1.2.3.9", "a b"},
	},
}

func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := Parse(tt.value)
			if len(got) != len(tt.want) {
				t.Fatalf("Parse(%q) = %d entries %+v, want %d", tt.value, len(got), got, len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("entry %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
			if len(errs) != len(tt.bad) {
				t.Fatalf("Parse(%q) errors = %v, want one for each of %q", tt.value, errs, tt.bad)
			}
			for i, err := range errs {
				var ee *EntryError
				if !errors.As(err, &ee) || ee.Entry != tt.bad[i] {
					t.Errorf("error %d = %v, want an EntryError naming %q", i, err, tt.bad[i])
				}
				if !strings.Contains(err.Error(), strconv.Quote(tt.bad[i])) {
					t.Errorf("error %q does not name the entry %q", err, tt.bad[i])
				}
			}
		})
	}
}

var matchTests = []struct {
	name  string
	entry string
	host  string
	port  uint16
	want  bool
}{
	{"bare-apex", "example.com", "example.com", 80, true},
	{"bare-subdomain", "example.com", "www.example.com", 80, true},
	{"bare-label-boundary", "example.com", "notexample.com", 80, false},
	{"dot-apex", ".example.com", "example.com", 80, false},
	{"dot-subdomain", ".example.com", "a.b.example.com", 80, true},
	{"star-dot-apex", "*.example.com", "example.com", 80, false},
	{"star-dot-subdomain", "*.example.com", "www.example.com", 443, true},
	{"case-insensitive", "EXAMPLE.com", "WWW.Example.COM", 80, true},
	{"rooted-entry-plain-host", "example.com.", "example.com", 80, false},
	{"rooted-entry-rooted-host", "example.com.", "www.example.com.", 80, true},
	{"plain-entry-rooted-host", "example.com", "example.com.", 80, false},
	{"domain-port-match", "example.com:8080", "example.com", 8080, true},
	{"domain-port-mismatch", "example.com:8080", "example.com", 80, false},
	{"domain-never-matches-ip", "2.3", "10.1.2.3", 80, false},
	{"domain-numeric-name", "2.3", "host.2.3", 80, true},
	{"idn-entry-unicode-host", "bücher.example", "www.bücher.example", 80, true},
	{"idn-entry-punycode-host", "bücher.example", "xn--bcher-kva.example", 80, true},
	{"star-all", "*", "10.1.2.3", 1, true},
	{"ip-equal", "10.1.2.3", "10.1.2.3", 8080, true},
	{"ip-other", "10.1.2.3", "10.1.2.4", 80, false},
	{"ip-port-match", "10.1.2.3:8080", "10.1.2.3", 8080, true},
	{"ip-port-mismatch", "10.1.2.3:8080", "10.1.2.3", 80, false},
	{"ip-not-a-name", "10.1.2.3", "10.1.2.3.nip.io", 80, false},
	{"ipv6-value-compare", "fd00:0::1", "fd00::1", 80, true},
	{"ipv6-bracketed-host", "fd00::1", "[fd00::1]", 80, true},
	{"ipv6-bracket-port", "[fd00::1]:443", "fd00::1", 443, true},
	{"ipv4-mapped-equals-v4", "::ffff:10.1.2.3", "10.1.2.3", 80, true},
	{"cidr4", "10.0.0.0/8", "10.200.0.1", 80, true},
	{"cidr4-outside", "10.0.0.0/8", "11.0.0.1", 80, false},
	{"cidr4-mapped-host", "10.0.0.0/8", "::ffff:10.1.2.3", 80, true},
	{"cidr4-not-a-name", "10.0.0.0/8", "db.internal", 80, false},
	{"cidr4-zero", "0.0.0.0/0", "192.0.2.1", 80, true},
	{"cidr6", "fd00::/8", "fd12::1", 80, true},
	{"cidr6-not-v4", "::/0", "10.1.2.3", 80, false},
	{"cidr6-mapped-is-v4", "::ffff:0:0/96", "10.1.2.3", 80, true},
	{"cidr6-mapped-not-v6", "::ffff:0:0/96", "fd00::1", 80, false},
	{"cidr6-short-mapped-is-v6", "::ffff:0:0/80", "10.1.2.3", 80, false},
}

func TestMatch(t *testing.T) {
	for _, tt := range matchTests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ParseEntry(tt.entry)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.Match(tt.host, tt.port); got != tt.want {
				t.Errorf("%q.Match(%q, %d) = %v, want %v", tt.entry, tt.host, tt.port, got, tt.want)
			}
		})
	}
}

// goDirect asks golang.org/x/net/http/httpproxy (the code net/http vendors)
// whether host:port goes direct with NO_PROXY=value.
func goDirect(t testing.TB, value, host string, port uint16) (direct, ok bool) {
	u := &url.URL{Scheme: "http", Host: net.JoinHostPort(host, strconv.Itoa(int(port)))}
	if _, err := url.Parse(u.String()); err != nil {
		return false, false
	}
	cfg := httpproxy.Config{HTTPProxy: "http://127.0.0.1:9", NoProxy: value}
	p, err := cfg.ProxyFunc()(u)
	if err != nil {
		t.Fatalf("httpproxy: %v", err)
	}
	return p == nil, true
}

// goSpecial reports hosts Go always sends direct, whatever NO_PROXY says.
func goSpecial(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// TestMatchAgreesWithHTTPProxy compares Entry.Match with Go's own matcher for
// every entry and host in the tables above.
func TestMatchAgreesWithHTTPProxy(t *testing.T) {
	var entries, hosts []string
	for _, tt := range matchTests {
		entries = append(entries, tt.entry)
		hosts = append(hosts, tt.host)
	}
	for _, tt := range parseTests {
		for _, raw := range strings.Split(tt.value, ",") {
			if raw = strings.TrimSpace(raw); raw != "" {
				entries = append(entries, raw)
			}
		}
	}
	hosts = append(hosts, "kubernetes.default.svc", "1.2.3.5", "fd00::1:80", "a.b", "x.com", "foo.", "fe80::1")
	for _, raw := range entries {
		for _, host := range hosts {
			for _, port := range []uint16{80, 443, 8080} {
				checkAgainstGo(t, raw, strings.Trim(host, "[]"), port)
			}
		}
	}
}

func checkAgainstGo(t testing.TB, raw, host string, port uint16) {
	if goSpecial(host) {
		return
	}
	want, ok := goDirect(t, raw, host, port)
	if !ok {
		return
	}
	e, err := ParseEntry(raw)
	if err != nil {
		// Go keeps a few unreadable entries as literal names; they match
		// only the same odd literal or, for "." and "*.", rooted names.
		if want && !strings.HasSuffix(host, ".") && strings.ToLower(host) != strings.TrimPrefix(strings.ToLower(raw), ".") {
			t.Errorf("entry %q rejected (%v) but Go matches %q:%d", raw, err, host, port)
		}
		return
	}
	if got := e.Match(host, port); got != want {
		t.Errorf("entry %q: Match(%q, %d) = %v, Go's httpproxy says %v", raw, host, port, got, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, tt := range parseTests {
		f.Add(tt.value, "www.example.com", uint16(80))
	}
	for _, tt := range matchTests {
		f.Add(tt.entry, tt.host, tt.port)
	}
	f.Fuzz(func(t *testing.T, value, host string, port uint16) {
		entries, errs := Parse(value)
		for _, err := range errs {
			var ee *EntryError
			if !errors.As(err, &ee) || ee.Entry == "" {
				t.Fatalf("error %v is not an EntryError naming the entry", err)
			}
		}
		for _, e := range entries {
			if e.Raw == "" || e.Raw != strings.TrimSpace(e.Raw) || strings.Contains(e.Raw, ",") {
				t.Fatalf("entry Raw %q not a trimmed single entry", e.Raw)
			}
			switch e.Kind {
			case KindAll:
			case KindDomain:
				if err := checkDomain(e.Domain); err != nil {
					t.Fatalf("entry %q: Domain %q: %v", e.Raw, e.Domain, err)
				}
			case KindIP, KindCIDR:
				if !e.Prefix.IsValid() || e.Prefix != e.Prefix.Masked() {
					t.Fatalf("entry %q: Prefix %v not valid and masked", e.Raw, e.Prefix)
				}
			default:
				t.Fatalf("entry %q: kind %v", e.Raw, e.Kind)
			}
			again, err := ParseEntry(e.Raw)
			if err != nil || again != e {
				t.Fatalf("ParseEntry(%q) = %+v, %v; Parse gave %+v", e.Raw, again, err, e)
			}
			e.Match(host, port)
		}
		// A single entry must agree with Go on hosts Go itself would accept.
		if port == 0 || strings.ContainsAny(host, " \t\r\n%/?#@[]") || strings.Contains(value, ",") {
			return
		}
		if _, err := netip.ParseAddr(host); err != nil && checkDomain(strings.TrimSuffix(strings.ToLower(host), ".")) != nil {
			return
		}
		checkAgainstGo(t, value, host, port)
	})
}

func TestWHATWGIPv6(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:10.1.2.3":    "::ffff:a01:203",
		"fd00:0:0:0:0:0:0:1": "fd00::1",
		"::1":                "::1",
		"::":                 "::",
		"1:0:0:2:0:0:0:3":    "1:0:0:2::3",
		"1:0:2:0:3:0:4:0":    "1:0:2:0:3:0:4:0",
		"FD00::A":            "fd00::a",
		"0:0:1::":            "0:0:1::",
	} {
		if got := whatwgIPv6(netip.MustParseAddr(in)); got != want {
			t.Errorf("whatwgIPv6(%s) = %s, want %s", in, got, want)
		}
	}
}

// FuzzVersions checks the version reader and the client selector on any
// input: no panic, a total order, and family@version either a row whose
// ranges hold the version or an error.
func FuzzVersions(f *testing.F) {
	for _, s := range []string{"1.21", "v8.10.1", "3.13.0", "", "1..2", "9999999999999", "1.2.3-rc.1", "x"} {
		f.Add(s, "8.10.0")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if x, y := compareVersions(a, b), compareVersions(b, a); x != -y {
			t.Fatalf("compare(%q,%q)=%d but compare(%q,%q)=%d", a, b, x, b, a, y)
		}
		if compareVersions(a, a) != 0 {
			t.Fatalf("%q is not equal to itself", a)
		}
		c, err := lookupClient("undici@" + a)
		if err == nil && !c.ContainsVersion(a) {
			t.Fatalf("undici@%s selects %s, whose ranges %s do not hold it", a, c.Name, c.Versions())
		}
	})
}

// FuzzExplain runs every model on any NO_PROXY value and URL host: no
// panic, a decision and a reason from each, and no password in a result.
func FuzzExplain(f *testing.F) {
	for _, s := range [][2]string{{"example.com", "example.com"}, {"[::ffff:10.1.2.3]", "::ffff:0:0/96"}, {"127.1", "127.0.0.1"},
		{"[fd00::1]", "fd00:0::1, *"}, {"bücher.example", "*.bücher.example."}, {"10.1.2.3:8080", "0x0a.1.2.3/8,[::1]:80"}} {
		f.Add(s[0], s[1])
	}
	cs := Clients()
	f.Fuzz(func(t *testing.T, host, np string) {
		u := "http://" + host + "/"
		if _, err := parseTarget(u); err != nil {
			return
		}
		env := Env{"http_proxy": "http://u:secret@127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:8", "no_proxy": np, "NO_PROXY": np, "NODE_USE_ENV_PROXY": "1"}
		rs, err := Explain(u, env, cs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Decision < DecisionDirect || r.Decision > DecisionError || r.Reason == "" {
				t.Fatalf("%s: %+v", r.Client, r)
			}
			if strings.Contains(r.Proxy+r.Reason, "secret") {
				t.Fatalf("%s shows the password: %+v", r.Client, r)
			}
		}
	})
}

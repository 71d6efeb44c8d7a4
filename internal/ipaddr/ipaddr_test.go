package ipaddr

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestParsePrefix(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{" 10.0.0.0/8 ", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"}, // host bits dropped
		{"10.1.2.3", "10.1.2.3/32"},
		{"0.0.0.0/0", "0.0.0.0/0"},
		{"fd00::/8", "fd00::/8"},
		{"fd00::1", "fd00::1/128"},
		{"FD00::1/128", "fd00::1/128"},
		{"::/0", "::/0"}, // IPv6 only
		{"::ffff:10.1.2.3", "10.1.2.3/32"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"::ffff:0:0/96", "0.0.0.0/0"},
		{"::ffff:a01:203/128", "10.1.2.3/32"},
		{"::ffff:0:0/95", "::fffe:0:0/95"}, // shorter than /96: an IPv6 range
		{"::ffff:0:0/80", "::/80"},
		{"64:ff9b::a00:0/104", "64:ff9b::a00:0/104"}, // embeddings stay IPv6 ranges
		{"2002:a00::/24", "2002:a00::/24"},
		{"127.0.0.0/8", "127.0.0.0/8"},
		// Refused.
		{"", "error"},
		{"  ", "error"},
		{"fe80::1%eth0", "error"},
		{"fe80::%eth0/64", "error"},
		{"10.0.0.0/33", "error"},
		{"fd00::/129", "error"},
		{"10.0.0.0/-1", "error"},
		{"10.0.0/8", "error"},
		{"010.0.0.1", "error"}, // octal or decimal? neither
		{"[::1]", "error"},
		{"[::1]/128", "error"},
		{"10.0.0.0/8/8", "error"},
		{"example.com", "error"},
		{"*", "error"},
	} {
		p, err := ParsePrefix(tt.in)
		got := p.String()
		if err != nil {
			got = "error"
			if !strings.Contains(err.Error(), "range") && !strings.Contains(err.Error(), "zone") {
				t.Errorf("ParsePrefix(%q): error %q does not say what is wanted", tt.in, err)
			}
		}
		if got != tt.want {
			t.Errorf("ParsePrefix(%q) = %s (%v), want %s", tt.in, got, err, tt.want)
		}
	}
}

func TestParseAddr(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"10.1.2.3", "10.1.2.3"},
		{"::ffff:10.1.2.3", "10.1.2.3"},
		{"2001:db8::1", "2001:db8::1"},
		{"fe80::1%eth0", "error"},
		{"10.0.0.0/8", "error"},
		{"", "error"},
	} {
		a, err := ParseAddr(tt.in)
		got := a.String()
		if err != nil {
			got = "error"
		}
		if got != tt.want {
			t.Errorf("ParseAddr(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// carriedCases: every embedding at its edges, written as the compact
// "via addr" list of carried.
var carriedCases = []struct{ addr, want string }{
	{"10.0.0.1", ""},
	{"::ffff:10.0.0.1", ""}, // the IPv4 itself
	{"::", ""},
	{"::1", ""},
	{"::2", "compatible 0.0.0.2"},
	{"::a00:1", "compatible 10.0.0.1"},
	{"::ffff:ffff", "compatible 255.255.255.255"},
	{"::1:0:0", ""},
	{"64:ff9b::", "nat64 0.0.0.0"},
	{"64:ff9b::a00:1", "nat64 10.0.0.1"},
	{"64:ff9b::10.0.0.1", "nat64 10.0.0.1"},
	{"64:ff9b::ffff:ffff", "nat64 255.255.255.255"},
	{"64:ff9b::1:0:0", ""}, // outside the /96
	{"64:ff9b:0:1::a00:1", ""},
	{"64:ff9b:1::a00:1", "nat64_local 10.0.0.1, nat64_local 0.0.0.10, nat64_local 0.0.0.0, nat64_local 0.0.0.0"},
	// /48 layout of 10.0.0.1: bytes 6,7 = 10.0; byte 8 = u; bytes 9,10 = 0.1.
	{"64:ff9b:1:a00:0:100::", "nat64_local 0.0.0.0, nat64_local 0.1.0.0, nat64_local 0.0.1.0, nat64_local 10.0.0.1"},
	// /64 layout of 192.168.1.1: byte 8 = u, bytes 9-12.
	{"64:ff9b:1:0:c0:a801:100::", "nat64_local 1.0.0.0, nat64_local 192.168.1.1, nat64_local 0.192.168.1, nat64_local 0.0.192.168"},
	// u-octet set: only the /96 layout is possible.
	{"64:ff9b:1:0:ff00::a00:1", "nat64_local 10.0.0.1"},
	{"64:ff9b:2::a00:1", ""},
	{"2002:a00:1::1", "6to4 10.0.0.1"},
	{"2002::", "6to4 0.0.0.0"},
	{"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "6to4 255.255.255.255"},
	{"2003::a00:1", ""},
	{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "teredo_client 192.0.2.45, teredo_server 65.54.227.120"},
	{"2001:0:7f00:1::f5ff:fffe", "teredo_client 10.0.0.1, teredo_server 127.0.0.1"},
	{"2001:1::a00:1", ""},
	{"2001:db8::a00:1", ""},
	{"fe80::a00:1%eth0", ""},
}

func carried(a netip.Addr) string {
	es, n := Carried(a)
	var parts []string
	for _, e := range es[:n] {
		parts = append(parts, e.Via.String()+" "+e.Addr.String())
	}
	return strings.Join(parts, ", ")
}

func TestCarried(t *testing.T) {
	for _, tt := range carriedCases {
		a := netip.MustParseAddr(tt.addr)
		if got := carried(a); got != tt.want {
			t.Errorf("Carried(%s) = %q, want %q", tt.addr, got, tt.want)
		}
		if got, want := carried(a), naiveCarried(a); got != want {
			t.Errorf("Carried(%s) = %q, naive model %q", tt.addr, got, want)
		}
	}
	for e := EmbedMapped; e <= EmbedLocalNAT64; e++ {
		if e.String() == "unknown" || e.Human() == "unknown" || !e.Prefix().IsValid() {
			t.Errorf("Embedding(%d) = %q %q %v", e, e.String(), e.Human(), e.Prefix())
		}
	}
}

func TestLookup(t *testing.T) {
	ps := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("64:ff9b::c000:200/120"),
		netip.MustParsePrefix("203.0.113.7/32"),
	}
	for _, tt := range []struct {
		addr          string
		dialled, with string
	}{
		{"10.1.2.3", "10.0.0.0/8", "10.0.0.0/8"},
		{"::ffff:10.1.2.3", "10.0.0.0/8", "10.0.0.0/8"},
		{"8.8.8.8", "", ""},
		{"64:ff9b::a01:203", "", "10.0.0.0/8 (NAT64 of 10.1.2.3)"},
		{"64:ff9b::c000:201", "64:ff9b::c000:200/120", "64:ff9b::c000:200/120"}, // the IPv6 range as written
		{"64:ff9b:1::a01:203", "", "10.0.0.0/8 (local-use NAT64 of 10.1.2.3)"},
		{"2002:a01:203::", "", "10.0.0.0/8 (6to4 of 10.1.2.3)"},
		{"2002:cb00:7107::", "", "203.0.113.7/32 (6to4 of 203.0.113.7)"},
		{"2001:0:cb00:7107::ffff:ffff", "", "203.0.113.7/32 (Teredo server of 203.0.113.7)"},
		{"2001:0:808:808::f5fe:fefc", "", "10.0.0.0/8 (Teredo client of 10.1.1.3)"},
		{"::a01:203", "", "10.0.0.0/8 (IPv4-compatible of 10.1.2.3)"},
		{"2606:4700::1111", "", ""},
	} {
		a := netip.MustParseAddr(tt.addr)
		for _, c := range []struct {
			sc   Scope
			want string
		}{{AsDialled, tt.dialled}, {WithCarried, tt.with}} {
			h, ok := Lookup(ps, a, c.sc)
			got := ""
			if ok {
				got = h.String()
			}
			if got != c.want {
				t.Errorf("Lookup(%s, %d) = %q, want %q", tt.addr, c.sc, got, c.want)
			}
			if got != naiveLookup(ps, a, c.sc) {
				t.Errorf("Lookup(%s, %d) = %q, naive model %q", tt.addr, c.sc, got, naiveLookup(ps, a, c.sc))
			}
		}
		if Contains(ps, a) != (tt.dialled != "") {
			t.Errorf("Contains(%s) = %v", tt.addr, Contains(ps, a))
		}
	}
}

func TestLookupAllocs(t *testing.T) {
	ps := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, s := range []string{"8.8.8.8", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "64:ff9b:1::a00:1", "2606:4700::1111"} {
		a := netip.MustParseAddr(s)
		if n := testing.AllocsPerRun(100, func() { Lookup(ps, a, WithCarried) }); n != 0 {
			t.Errorf("Lookup(%s): %v allocations", s, n)
		}
	}
}

// The naive model: addresses as strings of 128 (or 32) bits, embeddings cut
// out of them by position, ranges compared as string prefixes, the parser
// built on package net. It shares nothing with the package but netip's
// parsing of the test's own inputs.

func bitString(a netip.Addr) string {
	var b strings.Builder
	for _, c := range a.AsSlice() {
		fmt.Fprintf(&b, "%08b", c)
	}
	return b.String()
}

func fromBits(s string) netip.Addr {
	var v [4]byte
	for i := 0; i < 32; i++ {
		if s[i] == '1' {
			v[i/8] |= 0x80 >> (i % 8)
		}
	}
	return netip.AddrFrom4(v)
}

func invert(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '0' {
			return '1'
		}
		return '0'
	}, s)
}

func hexBits(prefix string, bits int) string {
	a := netip.MustParseAddr(prefix)
	return bitString(a)[:bits]
}

// naiveCarried decodes the embeddings with bit positions from the RFCs.
func naiveCarried(a netip.Addr) string {
	a = a.WithZone("")
	if a.Is4() || a.Is4In6() {
		return ""
	}
	s := bitString(a)
	var out []string
	add := func(via, bits string) { out = append(out, via+" "+fromBits(bits).String()) }
	switch {
	case strings.HasPrefix(s, hexBits("2002::", 16)):
		add("6to4", s[16:48])
	case strings.HasPrefix(s, hexBits("2001::", 32)):
		add("teredo_client", invert(s[96:128]))
		add("teredo_server", s[32:64])
	case strings.HasPrefix(s, strings.Repeat("0", 96)):
		if v := s[96:]; v != strings.Repeat("0", 32) && v != strings.Repeat("0", 31)+"1" { // not :: or ::1
			add("compatible", v)
		}
	case strings.HasPrefix(s, hexBits("64:ff9b::", 96)):
		add("nat64", s[96:128])
	case strings.HasPrefix(s, hexBits("64:ff9b:1::", 48)):
		add("nat64_local", s[96:128])
		if s[64:72] == "00000000" {
			add("nat64_local", s[72:104])
			add("nat64_local", s[56:64]+s[72:96])
			add("nat64_local", s[48:64]+s[72:88])
		}
	}
	return strings.Join(out, ", ")
}

// naiveLookup compares each form with each range as bit strings.
func naiveLookup(ps []netip.Prefix, a netip.Addr, sc Scope) string {
	a = a.WithZone("")
	if a.Is4In6() {
		a = netip.AddrFrom4(a.As4())
	}
	type form struct {
		bits, via, addr string
	}
	forms := []form{{bitString(a), "", a.String()}}
	if sc == WithCarried && carried(a) != "" {
		for _, f := range strings.Split(naiveCarried(a), ", ") {
			via, v4, _ := strings.Cut(f, " ")
			forms = append(forms, form{bitString(netip.MustParseAddr(v4)), via, v4})
		}
	}
	human := map[string]string{"compatible": "IPv4-compatible", "nat64": "NAT64", "nat64_local": "local-use NAT64",
		"6to4": "6to4", "teredo_client": "Teredo client", "teredo_server": "Teredo server"}
	for _, f := range forms {
		for _, p := range ps {
			pb := bitString(p.Addr())
			if len(pb) == len(f.bits) && f.bits[:p.Bits()] == pb[:p.Bits()] {
				if f.via == "" {
					return p.String()
				}
				return p.String() + " (" + human[f.via] + " of " + f.addr + ")"
			}
		}
	}
	return ""
}

// naiveParse reads a range with package net.
func naiveParse(s string) string {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "%") || s == "" {
		return "error"
	}
	if !strings.Contains(s, "/") {
		ip := net.ParseIP(s)
		if ip == nil {
			return "error"
		}
		if v4 := ip.To4(); v4 != nil {
			return v4.String() + "/32"
		}
		return ip.String() + "/128"
	}
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		return "error"
	}
	ones, bits := n.Mask.Size()
	if bits == 128 && ip.To4() != nil {
		if ones < 96 {
			return (&net.IPNet{IP: n.IP.To16(), Mask: n.Mask}).String()
		}
		return (&net.IPNet{IP: n.IP.To4(), Mask: net.CIDRMask(ones-96, 32)}).String()
	}
	return n.String()
}

func TestParseNaive(t *testing.T) {
	for _, s := range []string{"10.0.0.0/8", "10.1.2.3/8", "::ffff:10.0.0.0/104", "::ffff:0:0/95", "fd00::1", "::ffff:1.2.3.4", "2001:db8::/32", "10.0.0.0/33", "::/0"} {
		p, err := ParsePrefix(s)
		got := p.String()
		if err != nil {
			got = "error"
		}
		if want := naiveParse(s); got != want {
			t.Errorf("ParsePrefix(%q) = %s, naive %s", s, got, want)
		}
	}
}

// FuzzParsePrefix compares ParsePrefix with the naive parser on any text,
// and Lookup with the naive model on the range it reads and an address.
func FuzzParsePrefix(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "::ffff:10.0.0.0/104", "fe80::1%eth0", "64:ff9b::/96", "1.2.3.4", "::ffff:0:0/95", "2001::/32", "2002::/16", " 10.0.0.1 ", "0.0.0.0/0", "::/0"} {
		f.Add(s, netip.MustParseAddr("10.0.0.1").AsSlice())
	}
	for _, tt := range carriedCases {
		f.Add("10.0.0.0/8", netip.MustParseAddr(tt.addr).AsSlice())
	}
	f.Fuzz(func(t *testing.T, s string, b []byte) {
		p, err := ParsePrefix(s)
		got := p.String()
		if err != nil {
			got = "error"
		}
		if want := naiveParse(s); got != want {
			t.Fatalf("ParsePrefix(%q) = %s (%v), naive %s", s, got, err, want)
		}
		if err == nil && (p != p.Masked() || p.Addr().Is4In6() && p.Bits() >= 96 || p.Addr().Zone() != "") {
			t.Fatalf("ParsePrefix(%q) = %s: not canonical", s, p)
		}
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		if got, want := carried(a), naiveCarried(a); got != want {
			t.Fatalf("Carried(%s) = %q, naive %q", a, got, want)
		}
		if err != nil {
			return
		}
		ps := []netip.Prefix{p}
		for _, sc := range []Scope{AsDialled, WithCarried} {
			h, ok := Lookup(ps, a, sc)
			got := ""
			if ok {
				got = h.String()
			}
			if want := naiveLookup(ps, a, sc); got != want {
				t.Fatalf("Lookup(%s, %s, %d) = %q, naive %q", p, a, sc, got, want)
			}
		}
	})
}

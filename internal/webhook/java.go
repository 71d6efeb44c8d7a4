package webhook

import (
	"net/netip"
	"strconv"
	"strings"
)

// This file is the seam to package noproxy's Java translation: until that
// lands on main, javaNonProxyHosts holds the translation the webhook needs.

// maxJavaExpansion caps the octet wildcards one CIDR expands to.
const maxJavaExpansion = 64

// javaNonProxyHosts translates NO_PROXY entries into the JVM's
// http.nonProxyHosts value: '|'-separated, '*' only at either end, no CIDRs,
// IPv6 in brackets (semantics §3.13, §5). A leading-dot suffix becomes
// "*.suffix"; a dotted name is listed as itself and "*.name" (Go's NO_PROXY
// covers subdomains) unless a suffix entry covers it already; an IPv4 CIDR becomes octet wildcards, expanded exactly
// (10.96.0.0/12 -> 10.96.*|...|10.111.*) when that takes at most 64 entries
// and dropped otherwise; IPv6 CIDRs and host:port entries are dropped (the
// JVM cannot express them).
func javaNonProxyHosts(entries []string) string {
	var out []string
	seen := map[string]bool{}
	add := func(e string) {
		if e != "" && !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	var suffixes []string
	for _, e := range entries {
		if strings.HasPrefix(e, ".") {
			suffixes = append(suffixes, strings.ToLower(e))
		}
	}
	covered := func(name string) bool {
		for _, s := range suffixes {
			if strings.HasSuffix(name, s) {
				return true
			}
		}
		return false
	}
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "" || e == ".":
		case e == "*":
			add("*")
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil || !p.Addr().Is4() {
				continue
			}
			for _, w := range octetWildcards(p.Masked()) {
				add(w)
			}
		case strings.HasPrefix(e, "["):
			if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				add("[" + a.String() + "]")
			}
		case strings.Count(e, ":") > 1:
			if a, err := netip.ParseAddr(e); err == nil {
				add("[" + a.String() + "]")
			}
		case strings.Contains(e, ":"): // host:port: the JVM has no port entries
		case strings.HasPrefix(e, "*."):
			add(e)
		case strings.HasPrefix(e, "."):
			add("*" + e)
		default:
			add(e)
			if _, err := netip.ParseAddr(e); err != nil && strings.Contains(e, ".") && !covered(e) {
				add("*." + e)
			}
		}
	}
	return strings.Join(out, "|")
}

// octetWildcards expresses an IPv4 prefix as "a.b.*" patterns, rounding the
// prefix length up to an octet boundary and enumerating the sub-prefixes.
func octetWildcards(p netip.Prefix) []string {
	bits := p.Bits()
	if bits == 32 {
		return []string{p.Addr().String()}
	}
	if bits == 0 {
		return []string{"*"}
	}
	octets := (bits + 7) / 8
	n := 1 << (octets*8 - bits)
	if n > maxJavaExpansion {
		return nil
	}
	a := p.Addr().As4()
	base := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	step := uint32(1) << (32 - octets*8)
	out := make([]string, 0, n)
	for i := range n {
		v := base + uint32(i)*step
		b := [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
		parts := make([]string, 0, 4)
		for j := 0; j < octets; j++ {
			parts = append(parts, strconv.Itoa(int(b[j])))
		}
		if octets == 4 {
			out = append(out, strings.Join(parts, "."))
		} else {
			out = append(out, strings.Join(parts, ".")+".*")
		}
	}
	return out
}

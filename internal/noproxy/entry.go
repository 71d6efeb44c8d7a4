package noproxy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Kind classifies a NO_PROXY entry.
type Kind uint8

// The kinds of NO_PROXY entries.
const (
	KindAll    Kind = iota + 1 // "*"
	KindDomain                 // a name or a suffix
	KindIP                     // a single address
	KindCIDR                   // an address range
)

// String returns the kind's name ("all", "domain", "ip", "cidr").
func (k Kind) String() string {
	switch k {
	case KindAll:
		return "all"
	case KindDomain:
		return "domain"
	case KindIP:
		return "ip"
	case KindCIDR:
		return "cidr"
	default:
		return fmt.Sprintf("unknown(%d)", uint8(k))
	}
}

// Entry is one NO_PROXY entry read the way egret itself reads it: Go's net/http
// rules (golang.org/x/net/http/httpproxy), which are also egret's routing-matcher
// rules: ".x.com" and "*.x.com" = subdomains only; "x.com" = x.com and its
// subdomains; "*" = everything; IPs and CIDRs (v4 and v6, "[v6]:port" form too);
// "host:port" restricts to that port.
//
// Like Go, a domain entry never matches an IP-literal host (CVE-2025-22870), and
// a name written with a trailing dot ("x.com.") matches only host names written
// with a trailing dot (Rooted), and the other way round.
type Entry struct {
	Raw    string // the entry as written, trimmed
	Kind   Kind
	Domain string       // KindDomain: lower-case ASCII (IDN → punycode), no leading "." / "*.", no trailing "."
	Apex   bool         // KindDomain: also matches Domain itself (false for ".x.com" and "*.x.com")
	Prefix netip.Prefix // KindIP (a /32 or /128) and KindCIDR; masked; IPv4-mapped IPv6 stored as IPv4
	Port   uint16       // 0 = any port

	// Rooted is set for a KindDomain entry written with a trailing dot
	// ("x.com."). Go then matches only host names that end in a dot.
	Rooted bool
}

// EntryError is a NO_PROXY entry that Parse cannot read (Go ignores it or it
// can never match).
type EntryError struct {
	Entry  string // the entry as written, trimmed
	Reason string // why it cannot be read, lower case
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("no_proxy entry %q: %s", e.Entry, e.Reason)
}

// Parse splits a NO_PROXY value on commas (trimming blanks, skipping empty
// entries) and parses each entry. Entries it cannot read are returned as errors
// (one per bad entry, naming it, each an *EntryError), never panics.
func Parse(value string) ([]Entry, []error) {
	var entries []Entry
	var errs []error
	for _, raw := range strings.Split(value, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		e, err := ParseEntry(raw)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		entries = append(entries, e)
	}
	return entries, errs
}

// ParseEntry parses one NO_PROXY entry (already split off its list). The
// error, if any, is an *EntryError.
func ParseEntry(raw string) (Entry, error) {
	raw = strings.TrimSpace(raw)
	bad := func(format string, args ...any) (Entry, error) {
		return Entry{}, &EntryError{Entry: raw, Reason: fmt.Sprintf(format, args...)}
	}
	if raw == "" {
		return bad("empty entry")
	}
	p := strings.ToLower(raw)
	if p == "*" {
		return Entry{Raw: raw, Kind: KindAll}, nil
	}
	if strings.Contains(p, "/") {
		if strings.Contains(p, "://") {
			return bad("an entry is a host name, IP or CIDR, not a URL")
		}
		pfx, err := parseCIDR(p)
		if err != nil {
			return bad("not a valid CIDR: %v", err)
		}
		return Entry{Raw: raw, Kind: KindCIDR, Prefix: pfx}, nil
	}

	host, portStr := p, ""
	if h, pp, err := net.SplitHostPort(p); err == nil {
		if h == "" {
			return bad("no host before the port")
		}
		if h[0] == '[' && h[len(h)-1] == ']' {
			h = h[1 : len(h)-1]
		}
		host, portStr = h, pp
	}
	var port uint16
	if portStr != "" {
		n, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || n == 0 || strconv.FormatUint(n, 10) != portStr {
			return bad("port %q is not a number from 1 to 65535 (it can never match)", portStr)
		}
		port = uint16(n)
	}

	if addr, err := netip.ParseAddr(host); err == nil {
		if addr.Zone() != "" {
			return bad("IPv6 zones (%%%s) are not supported", addr.Zone())
		}
		// Go compares with net.IP.Equal: an IPv4-mapped address is its IPv4 address.
		addr = addr.Unmap()
		return Entry{Raw: raw, Kind: KindIP, Prefix: netip.PrefixFrom(addr, addr.BitLen()), Port: port}, nil
	}
	if strings.HasPrefix(host, "[") {
		return bad("a bracketed IPv6 address without a port never matches in Go; write it without brackets")
	}
	if strings.Count(host, ":") > 0 {
		return bad("not a host name, IP address or CIDR")
	}

	if lo, hi, ok := strings.Cut(host, "-"); ok {
		if a, err := netip.ParseAddr(lo); err == nil && a.Is4() {
			if b, err := netip.ParseAddr(hi); err == nil && b.Is4() {
				return bad("address ranges are understood only by Node core; write a CIDR")
			}
		}
	}
	e := Entry{Raw: raw, Kind: KindDomain, Port: port, Apex: true}
	if strings.HasPrefix(host, "*.") {
		host = host[1:]
	}
	if strings.HasPrefix(host, ".") {
		e.Apex = false
		host = host[1:]
	}
	if strings.HasSuffix(host, ".") {
		e.Rooted = true
		host = host[:len(host)-1]
	}
	if strings.Contains(host, "*") {
		return bad("`*` is understood only as the whole entry or as a leading `*.`")
	}
	if !isASCII(host) {
		a, err := idnaLookup(host)
		if err != nil {
			return bad("not a valid international domain name: %v", err)
		}
		host = a
	}
	if err := checkDomain(host); err != nil {
		return bad("%v", err)
	}
	e.Domain = host
	return e, nil
}

// parseCIDR reads "addr/bits" the way net.ParseCIDR does (decimal bits, no
// zone) and returns the masked prefix.
func parseCIDR(s string) (netip.Prefix, error) {
	addrStr, bitsStr, _ := strings.Cut(s, "/")
	addr, err := netip.ParseAddr(addrStr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("address %q", addrStr)
	}
	if addr.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("IPv6 zones are not supported")
	}
	bits, err := strconv.ParseUint(bitsStr, 10, 8)
	if err != nil || bits > uint64(addr.BitLen()) || bitsStr == "" || bitsStr[0] == '+' {
		return netip.Prefix{}, fmt.Errorf("prefix length %q (0 to %d)", bitsStr, addr.BitLen())
	}
	p := netip.PrefixFrom(addr, int(bits)).Masked()
	if p.Addr().Is4In6() {
		// net.IPNet treats a masked ::ffff:a.b.c.d/96+n range as a.b.c.d/n.
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, nil
}

// checkDomain accepts host names made of letters, digits, '-' and '_' in
// non-empty dot-separated labels.
func checkDomain(name string) error {
	if name == "" {
		return fmt.Errorf("no host name")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" {
			return fmt.Errorf("empty label in %q", name)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q is not allowed in a host name", c)
			}
		}
	}
	return nil
}

// idnaLookup converts a name to ASCII the way Go's net/http does.
func idnaLookup(name string) (string, error) { return idna.Lookup.ToASCII(name) }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Match reports whether the entry covers host (a name or an IP literal, no
// brackets) on port, with Go's rules. It does not apply Go's client-level
// exceptions (localhost and loopback addresses always go direct in Go); those
// belong to the caller.
func (e Entry) Match(host string, port uint16) bool {
	if e.Kind == KindAll {
		return true
	}
	if e.Port != 0 && e.Port != port {
		return false
	}
	host = strings.TrimSpace(host)
	if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return e.matchAddr(addr.WithZone(""))
	}
	if e.Kind != KindDomain {
		return false
	}
	if !isASCII(host) {
		a, err := idnaLookup(host)
		if err != nil {
			return false
		}
		host = a
	}
	host = strings.ToLower(host)
	rooted := strings.HasSuffix(host, ".")
	if rooted != e.Rooted {
		return false
	}
	if rooted {
		host = host[:len(host)-1]
	}
	if e.Apex && host == e.Domain {
		return true
	}
	return len(host) > len(e.Domain) && host[len(host)-len(e.Domain)-1] == '.' && strings.HasSuffix(host, e.Domain)
}

// matchAddr is Go's net.IP semantics: an IPv4-mapped IPv6 address is its
// IPv4 address (Parse already unmapped the entry), and IPv6 ranges never
// contain IPv4 addresses.
func (e Entry) matchAddr(addr netip.Addr) bool {
	switch e.Kind {
	case KindIP:
		return e.Prefix.Addr() == addr.Unmap()
	case KindCIDR:
		a := addr.Unmap()
		return a.Is4() == e.Prefix.Addr().Is4() && e.Prefix.Contains(a)
	}
	return false
}

// String returns the entry as written.
func (e Entry) String() string { return e.Raw }

package ipaddr

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ParsePrefix reads a range — "10.0.0.0/8", "fd00::/8" — or a single
// address — "10.1.2.3" (a /32), "2001:db8::1" (a /128) — with the answers
// of the package comment: an IPv4-mapped address or range is its IPv4, host
// bits are dropped, a zone is refused. Surrounding spaces are ignored. The
// error names the value and what is wanted; callers add the field.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Prefix{}, errors.New("empty address range")
	}
	if strings.Contains(s, "%") {
		return netip.Prefix{}, fmt.Errorf("%q: a zone (%%...) is not allowed: a range names addresses, not an interface's", s)
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, wantRange(s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, wantRange(s)
	}
	return Canonical(p), nil
}

func wantRange(s string) error {
	return fmt.Errorf("%q is not an address or a range like 10.0.0.0/8 or fd00::/8", s)
}

// ParseAddr reads a single address, without a zone; an IPv4-mapped
// address is its IPv4.
func ParseAddr(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "%") {
		return netip.Addr{}, fmt.Errorf("%q: a zone (%%...) is not allowed", s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	return a.Unmap(), nil
}

// Canonical returns p masked, an IPv4-mapped range of /96 or longer as
// its IPv4 range. It is how ParsePrefix leaves a range, for ranges that
// come from elsewhere (a Kubernetes object, a test).
func Canonical(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// Plain is a as it is dialled and compared: without a zone, an
// IPv4-mapped address as its IPv4.
func Plain(a netip.Addr) netip.Addr { return a.WithZone("").Unmap() }

// Embedding is how an IPv6 address carries an IPv4 address.
type Embedding uint8

// The embeddings Carried decodes.
const (
	EmbedNone         Embedding = iota
	EmbedMapped                 // ::ffff:0:0/96, RFC 4291 (Plain makes it the IPv4 itself)
	EmbedCompatible             // ::/96 but :: and ::1, deprecated by RFC 4291
	EmbedNAT64                  // 64:ff9b::/96, RFC 6052: bits 96-127
	Embed6to4                   // 2002::/16, RFC 3056: bits 16-47
	EmbedTeredoServer           // 2001::/32, RFC 4380: bits 32-63
	EmbedTeredoClient           // 2001::/32, RFC 4380: bits 96-127, inverted
	EmbedLocalNAT64             // 64:ff9b:1::/48, RFC 8215: every RFC 6052 layout a /48 allows
)

// String returns the embedding's short stable name ("nat64", "6to4", ...);
// "" for EmbedNone.
func (e Embedding) String() string {
	switch e {
	case EmbedNone:
		return ""
	case EmbedMapped:
		return "mapped"
	case EmbedCompatible:
		return "compatible"
	case EmbedNAT64:
		return "nat64"
	case Embed6to4:
		return "6to4"
	case EmbedTeredoServer:
		return "teredo_server"
	case EmbedTeredoClient:
		return "teredo_client"
	case EmbedLocalNAT64:
		return "nat64_local"
	}
	return "unknown"
}

// Human is the embedding in words: "NAT64", "Teredo client".
func (e Embedding) Human() string {
	switch e {
	case EmbedMapped:
		return "IPv4-mapped"
	case EmbedCompatible:
		return "IPv4-compatible"
	case EmbedNAT64:
		return "NAT64"
	case Embed6to4:
		return "6to4"
	case EmbedTeredoServer:
		return "Teredo server"
	case EmbedTeredoClient:
		return "Teredo client"
	case EmbedLocalNAT64:
		return "local-use NAT64"
	}
	return e.String()
}

// Prefix returns the IPv6 range of the embedding.
func (e Embedding) Prefix() netip.Prefix {
	switch e {
	case EmbedMapped:
		return pfxMapped
	case EmbedCompatible:
		return pfxCompatible
	case EmbedNAT64:
		return pfxNAT64
	case Embed6to4:
		return pfx6to4
	case EmbedTeredoServer, EmbedTeredoClient:
		return pfxTeredo
	case EmbedLocalNAT64:
		return pfxLocalNAT64
	}
	return netip.Prefix{}
}

var (
	pfxMapped     = netip.MustParsePrefix("::ffff:0:0/96")
	pfxCompatible = netip.MustParsePrefix("::/96")
	pfxNAT64      = netip.MustParsePrefix("64:ff9b::/96")
	pfxLocalNAT64 = netip.MustParsePrefix("64:ff9b:1::/48")
	pfx6to4       = netip.MustParsePrefix("2002::/16")
	pfxTeredo     = netip.MustParsePrefix("2001::/32")
)

// Embedded is an IPv4 address an IPv6 address carries, and how.
type Embedded struct {
	Addr netip.Addr
	Via  Embedding
}

// MaxCarried bounds how many IPv4 addresses Carried finds in one address
// (a local-use NAT64 address has one per layout).
const MaxCarried = 4

// Carried returns the IPv4 addresses the IPv6 address a carries or may
// carry, and how many there are: none for an IPv4 address (IPv4-mapped
// included) or an IPv6 address outside the embedding ranges; one for
// IPv4-compatible (but :: and ::1), NAT64 64:ff9b::/96 and 6to4; two for
// Teredo (the client's, then the server's); and for the local-use NAT64
// range 64:ff9b:1::/48, where the operator chooses the layout, one for
// each RFC 6052 layout the address can have (/96, then /64, /56 and /48,
// which keep bits 64-71 zero). The ranges are disjoint: an address is in
// at most one. It does not allocate.
func Carried(a netip.Addr) (out [MaxCarried]Embedded, n int) {
	a = Plain(a)
	if !a.Is6() {
		return out, 0
	}
	b := a.As16()
	add := func(v4 [4]byte, via Embedding) {
		out[n] = Embedded{Addr: netip.AddrFrom4(v4), Via: via}
		n++
	}
	switch {
	case b[0] == 0x20 && b[1] == 0x02: // 6to4 2002::/16
		add([4]byte(b[2:6]), Embed6to4)
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // Teredo 2001::/32
		add([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}, EmbedTeredoClient)
		add([4]byte(b[4:8]), EmbedTeredoServer)
	case zero(b[:12]): // IPv4-compatible ::/96
		if v := [4]byte(b[12:]); v != [4]byte{} && v != [4]byte{0, 0, 0, 1} {
			add(v, EmbedCompatible)
		}
	case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zero(b[4:12]): // NAT64 64:ff9b::/96
		add([4]byte(b[12:]), EmbedNAT64)
	case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1: // 64:ff9b:1::/48
		add([4]byte(b[12:]), EmbedLocalNAT64) // /96
		if b[8] == 0 {
			add([4]byte(b[9:13]), EmbedLocalNAT64)                  // /64
			add([4]byte{b[7], b[9], b[10], b[11]}, EmbedLocalNAT64) // /56
			add([4]byte{b[6], b[7], b[9], b[10]}, EmbedLocalNAT64)  // /48
		}
	}
	return out, n
}

func zero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Scope is which forms of a destination address a range is compared with.
type Scope uint8

const (
	// AsDialled compares the address as it is dialled (Plain): for what
	// opens — allow rules, direct and upstream routes, the SSRF guard's
	// allow list, client allow-lists.
	AsDialled Scope = iota + 1
	// WithCarried also compares every IPv4 address the address carries or
	// may carry (Carried): for what closes — deny rules, DENY_CIDRS, a
	// policy's deny — so no spelling of a denied IPv4 address passes.
	WithCarried
)

// Hit is a range that holds a destination address.
type Hit struct {
	Prefix netip.Prefix // the range
	Addr   netip.Addr   // the address it holds: the destination (Plain), or an IPv4 address it carries
	Via    Embedding    // how the destination carries Addr; EmbedNone when Addr is the destination
}

// String is the range, and the carried address when that is what it
// holds: "10.0.0.0/8", "10.0.0.0/8 (NAT64 of 10.0.0.1)".
func (h Hit) String() string {
	if h.Via == EmbedNone {
		return h.Prefix.String()
	}
	return h.Prefix.String() + " (" + h.Via.Human() + " of " + h.Addr.String() + ")"
}

// Lookup returns the first range of ps that holds a in the forms sc
// compares: a itself first, then (WithCarried) each address Carried finds,
// in its order. ps are expected canonical (ParsePrefix, Canonical). It does
// not allocate.
func Lookup(ps []netip.Prefix, a netip.Addr, sc Scope) (Hit, bool) {
	if len(ps) == 0 {
		return Hit{}, false
	}
	a = Plain(a)
	for _, p := range ps {
		if p.Contains(a) {
			return Hit{Prefix: p, Addr: a}, true
		}
	}
	if sc != WithCarried || a.Is4() {
		return Hit{}, false
	}
	es, n := Carried(a)
	for _, e := range es[:n] {
		for _, p := range ps {
			if p.Contains(e.Addr) {
				return Hit{Prefix: p, Addr: e.Addr, Via: e.Via}, true
			}
		}
	}
	return Hit{}, false
}

// Contains reports whether one of ps holds a as dialled (Lookup with
// AsDialled).
func Contains(ps []netip.Prefix, a netip.Addr) bool {
	_, ok := Lookup(ps, a, AsDialled)
	return ok
}

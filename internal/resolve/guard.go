package resolve

import (
	"math/bits"
	"net"
	"net/netip"

	"egret.io/egret/internal/ipaddr"
)

// Guard is the gateway's SSRF guard: it refuses every destination address
// that is not global unicast, so a client of a shared gateway cannot reach
// the cluster, the node, the cloud's metadata service or the gateway itself.
// It is checked on each address actually dialled, after resolution, so a
// name that resolves to 127.0.0.1 is caught as surely as the literal. A nil
// *Guard allows everything. A Guard must not be changed once in use; it is
// then safe for concurrent use.
//
// Refused, in the order checked (first match wins; the table test and
// docs/pools.md list the ranges):
//
//   - The IPv4 ranges of the IANA special-purpose registry that are not
//     globally reachable: 0.0.0.0/8, 10/8, 100.64/10 (CGNAT, which holds
//     Alibaba Cloud's metadata 100.100.100.200), 127/8, 169.254/16 (cloud
//     metadata 169.254.169.254), 172.16/12, 192.0.0.0/24, 192.0.2/24,
//     192.88.99/24, 192.168/16, 198.18/15, 198.51.100/24, 203.0.113/24, and
//     multicast 224/4, reserved 240/4 and broadcast 255.255.255.255.
//     192.0.0.9 (PCP anycast) and 192.0.0.10 (TURN anycast) are "globally
//     reachable" in the registry but are refused with the rest of
//     192.0.0.0/24: an anycast for "the nearest PCP/TURN server" reaches the
//     operator's own NAT or relay, not a destination on the internet.
//   - IPv6 outside the global unicast space 2000::/3 (loopback, unspecified,
//     link-local fe80::/10, site-local fec0::/10, unique local fc00::/7 with
//     AWS's metadata fd00:ec2::254, multicast ff00::/8, discard 100::/64,
//     SRv6 SIDs 5f00::/16, local-use NAT64 64:ff9b:1::/48 and every block
//     IANA keeps reserved), and inside it the documentation ranges
//     2001:db8::/32 and 3fff::/20 and the IETF protocol assignments
//     2001::/23 with its benchmarking 2001:2::/48. Of the registry's global
//     exceptions inside 2001::/23, AMT 2001:3::/32 and AS112
//     2001:4:112::/48 are allowed; the anycasts 2001:1::1-3 (PCP, TURN,
//     DNS-SD SRP: the nearest server is local infrastructure) and ORCHIDv2
//     2001:20::/28 and DRIP 2001:30::/28 (identifiers, not locators; nothing
//     answers TCP there) are refused.
//   - IPv6 addresses that embed a refused IPv4 address, named as such:
//     IPv4-mapped ::ffff:0:0/96, IPv4-compatible ::/96, NAT64 64:ff9b::/96,
//     6to4 2002::/16 and Teredo 2001::/32 (its server address and its
//     obfuscated client address). An IPv4-mapped address is the IPv4 address
//     (the kernel dials the IPv4), and so is a NAT64 address to the
//     translator: with a global IPv4 both are allowed, because DNS64 in an
//     IPv6-only cluster answers every IPv4-only site with 64:ff9b::/96 and
//     refusing them would cut such a gateway off from IPv4. Unlike those, 6to4
//     and Teredo are refused even with a global IPv4 (as Smokescreen refuses
//     them): 6to4 is deprecated (RFC 7526) and Teredo is a client tunnel, no
//     service is addressed that way, and where the packets go is up to
//     relays the guard cannot see. IPv4-compatible addresses (deprecated by
//     RFC 4291) are refused as reserved. ISATAP interface identifiers
//     (::5efe:a.b.c.d in any /64) are not decoded: the IPv4 they carry is
//     reached only through an ISATAP tunnel interface on the gateway's host,
//     which a node does not have, so such an address is an ordinary IPv6
//     address routed by its prefix.
//   - The host's own addresses (Own), also when embedded; loopback
//     addresses are refused as loopback, not as own addresses.
//
// Allow opens ranges the operator names. A prefix of Allow covering the
// address as dialled lets it through, whatever its class; an IPv4-mapped
// address and its IPv4 are the same destination, for Allow as for the
// classes. The IPv4 carried by a NAT64, 6to4, Teredo or IPv4-compatible
// address is reached through a translator or relay, a different path, so an
// Allow of 10.0.0.0/8 does not open 64:ff9b::a00:1; write the IPv6 prefix
// (64:ff9b::a00:0/104) to open it. An own address is opened only by an
// Allow entry naming exactly that address (a /32 or /128): a broad range
// such as the cluster's pod CIDR opens the cluster, not the gateway itself.
// Loopback is the exception: every loopback address is the host, so an
// Allow of 127.0.0.0/8 opens the whole range, 127.0.0.1 included. These
// are package ipaddr's answers, which every CIDR comparison shares.
type Guard struct {
	// Allow lists prefixes dialled even though they would be refused.
	Allow []netip.Prefix
	// Own are the proxy's own addresses (see OwnAddrs).
	Own []netip.Addr
}

// Class is why the Guard refuses an address: a closed set whose String is a
// short stable name, fit for a metric label.
type Class uint8

// The classes the Guard refuses.
const (
	ClassUnspecified        Class = iota + 1 // 0.0.0.0, ::
	ClassThisNetwork                         // 0.0.0.0/8 but 0.0.0.0
	ClassPrivate                             // 10/8, 172.16/12, 192.168/16
	ClassLoopback                            // 127/8, ::1
	ClassLinkLocal                           // 169.254/16, fe80::/10 (cloud metadata)
	ClassCGNAT                               // 100.64/10 (shared address space, RFC 6598)
	ClassULA                                 // fc00::/7 (unique local, RFC 4193)
	ClassMulticast                           // 224/4, ff00::/8
	ClassBroadcast                           // 255.255.255.255
	ClassReserved                            // 240/4, IPv6 outside 2000::/3 not named otherwise
	ClassDocumentation                       // 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20
	ClassBenchmarking                        // 198.18/15, 2001:2::/48
	ClassProtocolAssignment                  // 192.0.0.0/24, 2001::/23
	ClassTransition                          // 192.88.99/24, 6to4 2002::/16, Teredo 2001::/32
	ClassLocalNAT64                          // 64:ff9b:1::/48 (RFC 8215)
	ClassOwnAddress                          // an address of the gateway's host
)

// String returns the class's metric label ("private", "loopback", ...).
func (c Class) String() string {
	switch c {
	case ClassUnspecified:
		return "unspecified"
	case ClassThisNetwork:
		return "this_network"
	case ClassPrivate:
		return "private"
	case ClassLoopback:
		return "loopback"
	case ClassLinkLocal:
		return "link_local"
	case ClassCGNAT:
		return "cgnat"
	case ClassULA:
		return "ula"
	case ClassMulticast:
		return "multicast"
	case ClassBroadcast:
		return "broadcast"
	case ClassReserved:
		return "reserved"
	case ClassDocumentation:
		return "documentation"
	case ClassBenchmarking:
		return "benchmarking"
	case ClassProtocolAssignment:
		return "protocol_assignment"
	case ClassTransition:
		return "transition"
	case ClassLocalNAT64:
		return "nat64_local"
	case ClassOwnAddress:
		return "own_address"
	}
	return "unknown"
}

// Embedding is how an IPv6 address carries an IPv4 address (package
// ipaddr decodes them, for the Guard as for every CIDR comparison).
type Embedding = ipaddr.Embedding

// The embeddings the Guard names in a Refusal.
const (
	EmbedNone         = ipaddr.EmbedNone
	EmbedMapped       = ipaddr.EmbedMapped
	EmbedCompatible   = ipaddr.EmbedCompatible
	EmbedNAT64        = ipaddr.EmbedNAT64
	Embed6to4         = ipaddr.Embed6to4
	EmbedTeredoServer = ipaddr.EmbedTeredoServer
	EmbedTeredoClient = ipaddr.EmbedTeredoClient
)

// Refusal says why the Guard refuses an address.
type Refusal struct {
	// Class is the class refused: that of Embedded when Via is set.
	Class Class
	// Range is the refused range holding the address (or Embedded, when
	// Via is set); for an own address, that address as a /32 or /128.
	Range netip.Prefix
	// Embedded is the refused IPv4 address the dialled IPv6 address
	// carries; the zero Addr unless Via is set.
	Embedded netip.Addr
	// Via is how the dialled address carries Embedded; EmbedNone when the
	// address itself is refused.
	Via Embedding
}

// String is the refusal in words for an answer's body and the log: "private
// range 10.0.0.0/8", "NAT64 64:ff9b::/96 embedding link-local
// 169.254.0.0/16".
func (r *Refusal) String() string {
	var s string
	if r.Class == ClassOwnAddress {
		s = "own address " + r.Range.Addr().String()
	} else {
		s = rangeName(r.Class, r.Range) + " " + r.Range.String()
	}
	if r.Via != EmbedNone {
		via := r.Via.Prefix().String()
		if r.Via == EmbedMapped {
			via = "::ffff:0:0/96" // netip writes ::ffff:0.0.0.0/96
		}
		s = r.Via.Human() + " " + via + " embedding " + s
	}
	return s
}

// Check returns why a may not be dialled, or nil when it may. It does not
// allocate when a is allowed.
func (g *Guard) Check(a netip.Addr) *Refusal {
	if g == nil {
		return nil
	}
	a = a.WithZone("")
	via := EmbedNone
	if a.Is4In6() {
		a, via = a.Unmap(), EmbedMapped
	}
	allowed := false
	for _, p := range g.Allow {
		if allowContains(p, a) {
			if p.IsSingleIP() {
				return nil
			}
			allowed = true
		}
	}
	if !allowed {
		var r *Refusal
		if a.Is4() {
			r = g.check4(a)
			if r != nil && via != EmbedNone {
				r.Embedded, r.Via = a, via
			}
		} else {
			r = g.check6(a)
		}
		if r != nil {
			return r
		}
	}
	if g.own(a) {
		return &Refusal{Class: ClassOwnAddress, Range: netip.PrefixFrom(a, a.BitLen()), Embedded: embedded(via, a), Via: via}
	}
	return nil
}

func embedded(via Embedding, a netip.Addr) netip.Addr {
	if via == EmbedNone {
		return netip.Addr{}
	}
	return a
}

// Prohibited reports whether a may not be dialled, and its class's name.
//
// Deprecated: use Check, which also names the range; kept until
// internal/proxy moves to Check.
func (g *Guard) Prohibited(a netip.Addr) (bool, string) {
	if r := g.Check(a); r != nil {
		return true, r.Class.String()
	}
	return false, ""
}

// allowContains reports whether p covers a (which is never IPv4-mapped),
// as ipaddr reads a range: a prefix written in IPv4-mapped form covers the
// IPv4 addresses it maps, and one shorter than /96 is IPv6 only.
func allowContains(p netip.Prefix, a netip.Addr) bool {
	return ipaddr.Canonical(p).Contains(a)
}

// Owns reports whether a (as dialled: without a zone, IPv4-mapped as its
// IPv4) is one of the host's own addresses, as Check counts them.
func (g *Guard) Owns(a netip.Addr) bool { return g != nil && g.own(ipaddr.Plain(a)) }

// own reports whether a is one of the host's own addresses. Loopback
// addresses are not: all of 127.0.0.0/8 and ::1 are the host itself, so
// the loopback class refuses them and an Allow covering them opens them —
// an Allow of 127.0.0.0/8 opens 127.0.0.1 as it opens 127.0.0.2.
func (g *Guard) own(a netip.Addr) bool {
	if a.IsLoopback() {
		return false
	}
	for _, o := range g.Own {
		if ipaddr.Plain(o) == a {
			return true
		}
	}
	return false
}

// check4 classifies an IPv4 address.
func (g *Guard) check4(a netip.Addr) *Refusal {
	i := class4(a.As4())
	if i < 0 {
		return nil
	}
	return &Refusal{Class: specials4[i].class, Range: specials4[i].prefix}
}

// check6 classifies an IPv6 address that is not IPv4-mapped, decoding the
// IPv4 addresses it embeds.
func (g *Guard) check6(a netip.Addr) *Refusal {
	b := a.As16()
	if b[0]&0xe0 == 0x20 { // 2000::/3, global unicast but for these
		switch {
		case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // Teredo 2001::/32
			if r := g.carried(a); r != nil { // the client's address, then the server's
				return r
			}
			return &Refusal{Class: ClassTransition, Range: pfxTeredo}
		case b[0] == 0x20 && b[1] == 0x01 && b[2] < 0x02: // 2001::/23
			switch {
			case b[2] == 0 && b[3] == 0x03: // AMT 2001:3::/32
				return nil
			case b[2] == 0 && b[3] == 0x04 && b[4] == 0x01 && b[5] == 0x12: // AS112 2001:4:112::/48
				return nil
			case b[2] == 0 && b[3] == 0x02 && b[4] == 0 && b[5] == 0: // 2001:2::/48
				return &Refusal{Class: ClassBenchmarking, Range: pfxBench6}
			}
			return &Refusal{Class: ClassProtocolAssignment, Range: pfxProtocol6}
		case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8: // 2001:db8::/32
			return &Refusal{Class: ClassDocumentation, Range: pfxDoc6}
		case b[0] == 0x20 && b[1] == 0x02: // 6to4 2002::/16
			if r := g.carried(a); r != nil {
				return r
			}
			return &Refusal{Class: ClassTransition, Range: pfx6to4}
		case b[0] == 0x3f && b[1] == 0xff && b[2]&0xf0 == 0: // 3fff::/20
			return &Refusal{Class: ClassDocumentation, Range: pfxDoc6b}
		}
		return nil
	}
	switch {
	case a == netip.IPv6Unspecified():
		return &Refusal{Class: ClassUnspecified, Range: pfxUnspecified6}
	case a == netip.IPv6Loopback():
		return &Refusal{Class: ClassLoopback, Range: pfxLoopback6}
	case zero(b[:12]): // IPv4-compatible ::/96
		if r := g.carried(a); r != nil {
			return r
		}
		return &Refusal{Class: ClassReserved, Range: pfxCompatible}
	case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zero(b[4:12]): // NAT64 64:ff9b::/96
		return g.carried(a)
	case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1: // 64:ff9b:1::/48
		return &Refusal{Class: ClassLocalNAT64, Range: pfxLocalNAT64}
	case b[0] == 0x01 && zero(b[1:8]): // 100::/64
		return &Refusal{Class: ClassReserved, Range: pfxDiscard}
	case b[0] == 0x5f && b[1] == 0x00: // 5f00::/16
		return &Refusal{Class: ClassReserved, Range: pfxSRv6}
	case b[0]&0xfe == 0xfc: // fc00::/7
		return &Refusal{Class: ClassULA, Range: pfxULA}
	case b[0] == 0xfe && b[1]&0xc0 == 0x80: // fe80::/10
		return &Refusal{Class: ClassLinkLocal, Range: pfxLinkLocal6}
	case b[0] == 0xfe && b[1]&0xc0 == 0xc0: // fec0::/10
		return &Refusal{Class: ClassReserved, Range: pfxSiteLocal}
	case b[0] == 0xff: // ff00::/8
		return &Refusal{Class: ClassMulticast, Range: pfxMulticast6}
	}
	return &Refusal{Class: ClassReserved, Range: reserved6(a)}
}

// carried classifies the IPv4 addresses a carries (ipaddr.Carried): the
// refusal of the first refused.
func (g *Guard) carried(a netip.Addr) *Refusal {
	es, n := ipaddr.Carried(a)
	for _, e := range es[:n] {
		if r := g.embedded(e.Addr, e.Via); r != nil {
			return r
		}
	}
	return nil
}

// embedded classifies the IPv4 address v4 carried by an IPv6 address:
// refused when v4 is in a refused range or an own address.
func (g *Guard) embedded(v4 netip.Addr, via Embedding) *Refusal {
	r := g.check4(v4)
	if r == nil && g.own(v4) {
		r = &Refusal{Class: ClassOwnAddress, Range: netip.PrefixFrom(v4, 32)}
	}
	if r != nil {
		r.Embedded, r.Via = v4, via
	}
	return r
}

func zero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// reserved6 returns the block IANA reserves that holds a, an IPv6 address
// outside 2000::/3 and outside the ranges named above: ::/8, 100::/8,
// 200::/7, 400::/6, 800::/5, 1000::/4, 4000::/3 ... c000::/3, e000::/4,
// f000::/5, f800::/6 or fe00::/9.
func reserved6(a netip.Addr) netip.Prefix {
	b := a.As16()[0]
	n := 3
	switch {
	case b == 0:
		n = 8
	case b < 0x20:
		n = 8 - (bits.Len8(b) - 1)
	case b >= 0xe0 && b < 0xfe:
		n = bits.LeadingZeros8(^b) + 1
	case b == 0xfe:
		n = 9
	}
	p, _ := a.Prefix(n)
	return p
}

// special is a range of the registry the Guard refuses.
type special struct {
	prefix netip.Prefix
	class  Class
	name   string // in words, before the range: "private range"
}

var (
	pfxCompatible   = ipaddr.EmbedCompatible.Prefix()
	pfx6to4         = ipaddr.Embed6to4.Prefix()
	pfxTeredo       = ipaddr.EmbedTeredoServer.Prefix()
	pfxProtocol6    = netip.MustParsePrefix("2001::/23")
	pfxBench6       = netip.MustParsePrefix("2001:2::/48")
	pfxDoc6         = netip.MustParsePrefix("2001:db8::/32")
	pfxDoc6b        = netip.MustParsePrefix("3fff::/20")
	pfxUnspecified6 = netip.MustParsePrefix("::/128")
	pfxLoopback6    = netip.MustParsePrefix("::1/128")
	pfxLocalNAT64   = ipaddr.EmbedLocalNAT64.Prefix()
	pfxDiscard      = netip.MustParsePrefix("100::/64")
	pfxSRv6         = netip.MustParsePrefix("5f00::/16")
	pfxULA          = netip.MustParsePrefix("fc00::/7")
	pfxLinkLocal6   = netip.MustParsePrefix("fe80::/10")
	pfxSiteLocal    = netip.MustParsePrefix("fec0::/10")
	pfxMulticast6   = netip.MustParsePrefix("ff00::/8")
)

// specials4 are the refused IPv4 ranges; class4 indexes them.
var specials4 = []special{
	{netip.MustParsePrefix("0.0.0.0/32"), ClassUnspecified, "unspecified"},
	{netip.MustParsePrefix("0.0.0.0/8"), ClassThisNetwork, "this network"},
	{netip.MustParsePrefix("10.0.0.0/8"), ClassPrivate, "private range"},
	{netip.MustParsePrefix("100.64.0.0/10"), ClassCGNAT, "carrier-grade NAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), ClassLoopback, "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), ClassLinkLocal, "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), ClassPrivate, "private range"},
	{netip.MustParsePrefix("192.0.0.0/24"), ClassProtocolAssignment, "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), ClassDocumentation, "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), ClassTransition, "deprecated 6to4 relay anycast"},
	{netip.MustParsePrefix("192.168.0.0/16"), ClassPrivate, "private range"},
	{netip.MustParsePrefix("198.18.0.0/15"), ClassBenchmarking, "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), ClassDocumentation, "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), ClassDocumentation, "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), ClassMulticast, "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), ClassReserved, "reserved"},
	{netip.MustParsePrefix("255.255.255.255/32"), ClassBroadcast, "broadcast"},
}

// Indexes into specials4.
const (
	s4Unspecified = iota
	s4ThisNetwork
	s4Private10
	s4CGNAT
	s4Loopback
	s4LinkLocal
	s4Private172
	s4Protocol
	s4Doc1
	s4Relay
	s4Private192
	s4Bench
	s4Doc2
	s4Doc3
	s4Multicast
	s4Reserved
	s4Broadcast
)

// class4 returns the index in specials4 of the range holding b, or -1 when
// b is global.
func class4(b [4]byte) int {
	switch b[0] {
	case 0:
		if b == [4]byte{} {
			return s4Unspecified
		}
		return s4ThisNetwork
	case 10:
		return s4Private10
	case 100:
		if b[1]&0xc0 == 64 {
			return s4CGNAT
		}
	case 127:
		return s4Loopback
	case 169:
		if b[1] == 254 {
			return s4LinkLocal
		}
	case 172:
		if b[1]&0xf0 == 16 {
			return s4Private172
		}
	case 192:
		switch {
		case b[1] == 0 && b[2] == 0:
			return s4Protocol
		case b[1] == 0 && b[2] == 2:
			return s4Doc1
		case b[1] == 88 && b[2] == 99:
			return s4Relay
		case b[1] == 168:
			return s4Private192
		}
	case 198:
		switch {
		case b[1]&0xfe == 18:
			return s4Bench
		case b[1] == 51 && b[2] == 100:
			return s4Doc2
		}
	case 203:
		if b[1] == 0 && b[2] == 113 {
			return s4Doc3
		}
	case 255:
		if b == [4]byte{255, 255, 255, 255} {
			return s4Broadcast
		}
		return s4Reserved
	default:
		switch {
		case b[0] >= 240:
			return s4Reserved
		case b[0] >= 224:
			return s4Multicast
		}
	}
	return -1
}

// specials6 name the refused IPv6 ranges in words.
var specials6 = []special{
	{pfxUnspecified6, ClassUnspecified, "unspecified"},
	{pfxLoopback6, ClassLoopback, "loopback"},
	{pfxCompatible, ClassReserved, "deprecated IPv4-compatible"},
	{pfxLocalNAT64, ClassLocalNAT64, "local-use NAT64"},
	{pfxDiscard, ClassReserved, "discard-only"},
	{pfxTeredo, ClassTransition, "Teredo"},
	{pfxBench6, ClassBenchmarking, "benchmarking"},
	{pfxProtocol6, ClassProtocolAssignment, "IETF protocol assignments"},
	{pfxDoc6, ClassDocumentation, "documentation"},
	{pfx6to4, ClassTransition, "deprecated 6to4"},
	{pfxDoc6b, ClassDocumentation, "documentation"},
	{pfxSRv6, ClassReserved, "SRv6 SIDs"},
	{pfxULA, ClassULA, "unique local"},
	{pfxLinkLocal6, ClassLinkLocal, "link-local"},
	{pfxSiteLocal, ClassReserved, "deprecated site-local"},
	{pfxMulticast6, ClassMulticast, "multicast"},
}

// rangeName returns the words for a refused range.
func rangeName(c Class, p netip.Prefix) string {
	table := specials6
	if p.Addr().Is4() {
		table = specials4
	}
	for _, s := range table {
		if s.prefix == p {
			return s.name
		}
	}
	if c == ClassReserved && p.Addr().Is6() {
		return "reserved (outside global unicast 2000::/3)"
	}
	return c.String()
}

// OwnAddrs returns the addresses of the host's network interfaces.
func OwnAddrs() []netip.Addr {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ia := range ifaddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

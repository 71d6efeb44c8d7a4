package iptables

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"egret.io/egret/internal/ipaddr"
)

// Defaults of the init container's flags.
const (
	DefaultProxyUID     = 1337
	DefaultRedirectPort = 15001
)

// Family is an IP family: IPv4 (iptables) or IPv6 (ip6tables).
type Family int

// IP families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "ipv4"
	case IPv6:
		return "ipv6"
	default:
		return "unknown(" + strconv.Itoa(int(f)) + ")"
	}
}

// tool is the name of the family's iptables command family.
func (f Family) tool() string {
	if f == IPv6 {
		return "ip6tables"
	}
	return "iptables"
}

// loopback is the family's loopback range.
func (f Family) loopback() netip.Prefix {
	if f == IPv6 {
		return netip.MustParsePrefix("::1/128")
	}
	return netip.MustParsePrefix("127.0.0.0/8")
}

func (f Family) contains(a netip.Addr) bool {
	if f == IPv6 {
		return a.Is6() && !a.Is4In6()
	}
	return a.Is4() || a.Is4In6()
}

// Spec is the wire form of the rules' inputs, as flags and environment give
// them: list entries may hold several comma-separated values, empty entries
// are ignored. Compile validates it into a Config.
type Spec struct {
	ProxyUID          int      // UID whose traffic is never redirected (the proxy's)
	ProxyGID          int      // GID whose traffic is never redirected; negative = none
	ExcludeUIDs       []string // other UIDs whose traffic is never redirected (a mesh's proxy)
	RedirectPort      int      // local port of the transparent listener
	ExcludeCIDRs      []string // destinations that go direct: CIDRs or single addresses
	IncludeCIDRs      []string // if any, only these destinations are redirected
	ExcludePorts      []string // destination ports that go direct: "22" or "8000-8100"
	ExcludeInterfaces []string // outgoing interfaces whose traffic goes direct
	IPv6              bool     // also write ip6tables rules
}

// Config is the validated, immutable model the rules are built from.
type Config struct {
	ProxyUID          uint32
	ProxyGID          uint32
	HasProxyGID       bool
	ExcludeUIDs       []uint32 // deduplicated, in input order, without ProxyUID
	RedirectPort      uint16
	ExcludeCIDRs      []netip.Prefix // masked, deduplicated, in input order
	IncludeCIDRs      []netip.Prefix // masked, deduplicated, in input order
	ExcludePorts      []PortRange
	ExcludeInterfaces []string
	IPv6              bool
}

// PortRange is an inclusive range of TCP ports; First == Last for one port.
type PortRange struct{ First, Last uint16 }

func (r PortRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(int(r.First))
	}
	return strconv.Itoa(int(r.First)) + "-" + strconv.Itoa(int(r.Last))
}

// iptables spells a range with a colon.
func (r PortRange) arg() string {
	if r.First == r.Last {
		return strconv.Itoa(int(r.First))
	}
	return strconv.Itoa(int(r.First)) + ":" + strconv.Itoa(int(r.Last))
}

func (r PortRange) contains(p uint16) bool { return r.First <= p && p <= r.Last }

// Families lists the families the Config writes rules for: IPv4, and IPv6
// when enabled.
func (c Config) Families() []Family {
	if c.IPv6 {
		return []Family{IPv4, IPv6}
	}
	return []Family{IPv4}
}

// Redirected reports whether the rules built from c send a TCP connection to
// dst, made by a process that is not the proxy over a non-excluded,
// non-loopback interface, to the redirect port. It mirrors Build.
func (c Config) Redirected(dst netip.AddrPort) bool {
	a := dst.Addr().Unmap()
	fam := IPv4
	if a.Is6() {
		fam = IPv6
	}
	if fam == IPv6 && !c.IPv6 {
		return false
	}
	if fam.loopback().Contains(a) {
		return false
	}
	for _, r := range c.ExcludePorts {
		if r.contains(dst.Port()) {
			return false
		}
	}
	for _, p := range c.ExcludeCIDRs {
		if p.Contains(a) {
			return false
		}
	}
	if len(c.IncludeCIDRs) == 0 {
		return true
	}
	for _, p := range c.IncludeCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ifaceRE accepts Linux interface names (at most 15 bytes) with iptables'
// optional trailing + wildcard.
var ifaceRE = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,15}\+?$`)

// Compile validates s and returns the model. Errors name the flag-like field
// and the offending value.
func (s Spec) Compile() (Config, error) {
	var c Config
	if s.ProxyUID < 0 || int64(s.ProxyUID) > int64(^uint32(0))-1 {
		return Config{}, fmt.Errorf("proxy-uid %d: out of range", s.ProxyUID)
	}
	c.ProxyUID = uint32(s.ProxyUID)
	if s.ProxyGID >= 0 {
		if int64(s.ProxyGID) > int64(^uint32(0))-1 {
			return Config{}, fmt.Errorf("proxy-gid %d: out of range", s.ProxyGID)
		}
		c.ProxyGID, c.HasProxyGID = uint32(s.ProxyGID), true
	}
	for _, v := range splitList(s.ExcludeUIDs) {
		u, err := strconv.ParseUint(v, 10, 32)
		if err != nil || u == uint64(^uint32(0)) {
			return Config{}, fmt.Errorf("exclude-uids %q: not a UID (0-4294967294)", v)
		}
		if uint32(u) != c.ProxyUID && !slices.Contains(c.ExcludeUIDs, uint32(u)) {
			c.ExcludeUIDs = append(c.ExcludeUIDs, uint32(u))
		}
	}
	if s.RedirectPort < 1 || s.RedirectPort > 65535 {
		return Config{}, fmt.Errorf("redirect-port %d: must be 1-65535", s.RedirectPort)
	}
	c.RedirectPort = uint16(s.RedirectPort)
	c.IPv6 = s.IPv6
	var err error
	if c.ExcludeCIDRs, err = parsePrefixes("exclude-cidrs", s.ExcludeCIDRs); err != nil {
		return Config{}, err
	}
	if c.IncludeCIDRs, err = parsePrefixes("include-cidrs", s.IncludeCIDRs); err != nil {
		return Config{}, err
	}
	for _, v := range splitList(s.ExcludePorts) {
		r, err := parsePortRange(v)
		if err != nil {
			return Config{}, fmt.Errorf("exclude-ports %q: %w", v, err)
		}
		if !slices.Contains(c.ExcludePorts, r) {
			c.ExcludePorts = append(c.ExcludePorts, r)
		}
	}
	for _, v := range splitList(s.ExcludeInterfaces) {
		if !ifaceRE.MatchString(v) {
			return Config{}, fmt.Errorf("exclude-interfaces %q: not an interface name (1-15 of A-Z a-z 0-9 _ . @ -, optional trailing +)", v)
		}
		if !slices.Contains(c.ExcludeInterfaces, v) {
			c.ExcludeInterfaces = append(c.ExcludeInterfaces, v)
		}
	}
	return c, nil
}

// splitList flattens comma-separated entries, trimming blanks and dropping
// empty values.
func splitList(in []string) []string {
	var out []string
	for _, e := range in {
		for _, v := range strings.Split(e, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

func parsePrefixes(field string, in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range splitList(in) {
		p, err := ipaddr.ParsePrefix(v) // egret's one reading of a range
		switch {
		case err == nil:
		case strings.Contains(v, "%"):
			return nil, fmt.Errorf("%s %q: zones are not allowed", field, v)
		case strings.Contains(v, "/"):
			return nil, fmt.Errorf("%s %q: not a CIDR", field, v)
		default:
			return nil, fmt.Errorf("%s %q: not a CIDR or IP address", field, v)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func parsePortRange(v string) (PortRange, error) {
	lo, hi, isRange := strings.Cut(v, "-")
	if !isRange {
		lo, hi, isRange = strings.Cut(v, ":")
	}
	first, err := parsePort(lo)
	if err != nil {
		return PortRange{}, err
	}
	last := first
	if isRange {
		if last, err = parsePort(hi); err != nil {
			return PortRange{}, err
		}
		if last < first {
			return PortRange{}, fmt.Errorf("range %d-%d is backwards", first, last)
		}
	}
	return PortRange{first, last}, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q: must be 1-65535", s)
	}
	return uint16(n), nil
}

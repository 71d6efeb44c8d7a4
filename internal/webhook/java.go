package webhook

import (
	"net/netip"
	"strconv"
	"strings"

	"egret.io/egret/internal/noproxy"
)

// maxJavaExpansion caps the octet-aligned pieces one CIDR is split into.
const maxJavaExpansion = 64

// javaNonProxyHosts translates NO_PROXY entries into the JVM's
// http.nonProxyHosts value with noproxy.JavaNonProxyHosts. The JVM has no
// CIDRs and noproxy translates only octet-aligned ones, so an IPv4 CIDR off
// an octet boundary is first split into the octet-aligned prefixes covering
// exactly the same addresses (10.96.0.0/12 -> 10.96.0.0/16 ... 10.111.0.0/16,
// i.e. 10.96.*|...|10.111.*) when that takes at most 64 pieces; wider ones
// stay as they are and are dropped for Java.
func javaNonProxyHosts(entries []string) string {
	var in []string
	for _, e := range entries {
		p, err := netip.ParsePrefix(strings.TrimSpace(e))
		if err != nil || !p.Addr().Is4() || p.Bits()%8 == 0 {
			in = append(in, e)
			continue
		}
		if pieces := octetAligned(p.Masked()); pieces != nil {
			in = append(in, pieces...)
		} else {
			in = append(in, e)
		}
	}
	v, _ := noproxy.JavaNonProxyHosts(strings.Join(in, ","))
	return v
}

// octetAligned splits an IPv4 prefix into prefixes whose length is a
// multiple of 8, or returns nil when that takes more than maxJavaExpansion.
func octetAligned(p netip.Prefix) []string {
	bits := (p.Bits() + 7) / 8 * 8
	n := 1 << (bits - p.Bits())
	if n > maxJavaExpansion {
		return nil
	}
	a := p.Addr().As4()
	base := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	step := uint32(1) << (32 - bits)
	out := make([]string, 0, n)
	for i := range n {
		v := base + uint32(i)*step
		out = append(out, netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()+"/"+strconv.Itoa(bits))
	}
	return out
}

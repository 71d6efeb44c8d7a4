package resolve

import (
	"net"
	"net/netip"
)

// Guard classifies destination addresses for the gateway role (SSRF
// protection): loopback, link-local (which holds the cloud metadata address
// 169.254.169.254), unspecified and multicast addresses, the well-known
// metadata addresses outside link-local, and the proxy's own addresses are
// prohibited unless an Allow prefix covers them. It is checked on the
// address actually dialled, after resolution, so a name that resolves to
// 127.0.0.1 is caught as surely as the literal. A *Guard is immutable.
type Guard struct {
	// Allow lists prefixes dialled even though they would be prohibited.
	Allow []netip.Prefix
	// Own are the proxy's own addresses (see OwnAddrs).
	Own []netip.Addr
}

// Metadata lists cloud metadata addresses outside the link-local ranges,
// prohibited by the Guard (AWS IMDS over IPv6, Alibaba Cloud).
var Metadata = []netip.Addr{netip.MustParseAddr("fd00:ec2::254"), netip.MustParseAddr("100.100.100.200")}

// Prohibited reports whether a may not be dialled, and why ("loopback",
// "link_local", "unspecified", "multicast", "metadata", "own_address").
func (g *Guard) Prohibited(a netip.Addr) (bool, string) {
	a = a.Unmap()
	why := ""
	switch {
	case a.IsLoopback():
		why = "loopback"
	case a.IsLinkLocalUnicast():
		why = "link_local"
	case a.IsUnspecified():
		why = "unspecified"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		why = "multicast"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		why = "broadcast"
	}
	if why == "" {
		for _, m := range Metadata {
			if a == m {
				why = "metadata"
				break
			}
		}
	}
	if why == "" {
		for _, o := range g.Own {
			if a == o {
				why = "own_address"
				break
			}
		}
	}
	if why == "" {
		return false, ""
	}
	for _, p := range g.Allow {
		if p.Contains(a) {
			return false, ""
		}
	}
	return true, why
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

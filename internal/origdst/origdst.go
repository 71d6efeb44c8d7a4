package origdst

import (
	"errors"
	"net/netip"
	"syscall"
)

// ErrUnsupported is returned by Lookup on platforms without netfilter.
var ErrUnsupported = errors.New("original destination: not supported on this platform")

// ErrNotTracked is returned by Lookup when the kernel has no conntrack entry
// for the connection, so it cannot have been redirected.
var ErrNotTracked = errors.New("original destination: connection not tracked by conntrack")

// Lookup returns the address and port the client originally connected to.
// c is an accepted TCP connection (*net.TCPConn, or anything exposing its
// socket through syscall.Conn). For a connection that was tracked but not
// NATed the result is the connection's own local address; callers that must
// refuse connections aimed at themselves (loop guard) compare the two.
// IPv4-mapped IPv6 results are unmapped. Lookup is safe for concurrent use.
func Lookup(c syscall.Conn) (netip.AddrPort, error) {
	return lookup(c)
}

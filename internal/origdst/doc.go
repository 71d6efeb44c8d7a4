// Package origdst recovers the original destination of a TCP connection that
// iptables NAT (REDIRECT or DNAT) sent to a local listener: SO_ORIGINAL_DST
// for IPv4 and IP6T_SO_ORIGINAL_DST for IPv6, answered by the kernel from the
// connection's conntrack entry. It works on Linux only; elsewhere Lookup
// returns ErrUnsupported.
package origdst

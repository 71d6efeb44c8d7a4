// Package ipaddr is egret's one reading of IP addresses and address ranges:
// the parser of every CIDR-or-address value (routes, policies, the SSRF
// guard's allow list, client allow-lists, discovery, the command line), the
// IPv4 addresses an IPv6 address carries (IPv4-mapped, IPv4-compatible,
// NAT64 well-known and local-use prefixes, 6to4, Teredo), and the two ways
// a range is compared with a destination address.
//
// One answer everywhere:
//
//   - A zone (fe80::1%eth0) is refused in a range: a range names addresses,
//     not an interface's. A destination's zone is dropped before comparing.
//   - An IPv4-mapped address or range is its IPv4: ::ffff:10.0.0.0/104 is
//     10.0.0.0/8, and ::ffff:10.1.2.3 is 10.1.2.3 — the kernel dials the
//     IPv4. An IPv6 range shorter than /96 (::/0, ::ffff:0:0/80) is IPv6
//     only: it matches no IPv4 address.
//   - Host bits are dropped: 10.1.2.3/8 is 10.0.0.0/8.
//   - What opens (an allow rule, a direct or upstream route, the guard's
//     allow list, a client allow-list) matches the address as dialled:
//     Lookup with Dialled. An IPv6 address that carries an IPv4 address is
//     reached through a translator or relay, a different path: an allow of
//     10.0.0.0/8 does not open 64:ff9b::a00:1; the IPv6 range
//     (64:ff9b::a00:0/104) does.
//   - What closes (a deny rule, DENY_CIDRS, a policy deny) matches the
//     address as dialled and every IPv4 address it carries or may carry:
//     Lookup with Carried. A deny of 10.0.0.0/8 refuses 64:ff9b::a00:1,
//     64:ff9b:1::a00:1, 2002:a00:1::1, a Teredo address whose server or
//     client is 10.0.0.1, and ::a00:1.
package ipaddr

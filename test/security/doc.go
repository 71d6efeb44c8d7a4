// Package security holds the raw-wire regression tests of the gateway's
// security findings (issue 21): a gateway (proxy.Server with a policy
// engine, as proxyd wires it) with all four listeners — explicit HTTP,
// CONNECT, transparent and SOCKS5 — on loopback, a real DNS server of the
// test's own (internal/testutil/dnstest) for names with mixed and changing
// answers, origins on loopback addresses that count who reached them, and
// a dialer that plays the NAT64 translator (and 6to4/Teredo relay) of an
// IPv6-only cluster by dialling the IPv4 address an address carries. Each
// test asserts what the far side actually received.
package security

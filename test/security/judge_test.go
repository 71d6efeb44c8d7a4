package security

import (
	"net"
	"net/netip"
	"testing"

	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil/dnstest"
)

// TestEmbeddedIPv4Denied (issue 21, finding 5): every IPv6 spelling of a
// denied IPv4 address — NAT64 64:ff9b::/96 in hex and dotted form, local-use
// NAT64, 6to4, Teredo, IPv4-compatible — and a name that resolves to one
// (DNS64) is refused by a policy's deny CIDR and by the gateway's
// DENY_CIDRS, on every listener. The test's dialer is the translator: an
// address that got through would reach the denied origin.
func TestEmbeddedIPv4Denied(t *testing.T) {
	spellings := []string{
		"64:ff9b::cb00:7102", "64:ff9b::203.0.113.2", // NAT64, both spellings
		"64:ff9b:1::cb00:7102",   // local-use NAT64, /96 layout
		"2002:cb00:7102::1",      // 6to4
		"2001:0:cb00:7102::ffff", // Teredo, server address
		"::cb00:7102",            // IPv4-compatible
	}
	names := map[string][]string{"dns64.test": {"64:ff9b::cb00:7102"}}
	for _, by := range []string{"policy", "routes"} {
		t.Run(by, func(t *testing.T) {
			var rules []route.Rule
			if by == "routes" {
				rules = []route.Rule{{Match: route.Match{CIDRs: []netip.Prefix{netip.MustParsePrefix(forbiddenIP + "/32")}}, Action: route.Deny, Source: "test DENY_CIDRS"}}
			}
			g := startGateway(t, rules, dnstest.Fixed(names))
			if by == "policy" {
				g.policy(t, "nat64", "  default: allow\n  egress:\n  - {action: deny, cidrs: ["+forbiddenIP+"/32]}\n")
			}
			forbidden, _, port := origins(t, "")
			for _, kind := range listeners {
				for _, sp := range append(spellings, "dns64.test") {
					if kind == "transparent" && sp == "dns64.test" {
						continue // an original destination is an address
					}
					t.Run(kind+"/"+sp, func(t *testing.T) {
						src := g.pod("nat64")
						dest := net.JoinHostPort(sp, port)
						var orig netip.AddrPort
						if kind == "transparent" {
							orig = addrPort(sp, port)
						}
						body, _ := g.get(t, kind, src, dest, dest, orig)
						if body != "" {
							t.Errorf("%s reached %q", dest, body)
						}
						wantFields(t, g.line(t, kind, src), map[string]string{"error": "http_request_denied"})
					})
				}
			}
			if forbidden.reached() {
				t.Errorf("the denied address %s was reached through an IPv6 spelling (%d connections)", forbiddenIP, forbidden.conns.Load())
			}
		})
	}
}

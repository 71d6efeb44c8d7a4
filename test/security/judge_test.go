package security

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil/dnstest"
)

// TestMixedAnswers (issue 21, finding 2): a name answering [forbidden,
// allowed] reaches only the allowed address, by GET, CONNECT and SOCKS5,
// when a policy's cidrs rule allows only that address and when the
// gateway's own direct CIDR rule does; on the transparent listener the
// original address must be one the rule approved. Before the fix the rule
// matched the name by its allowed address and the dial tried every answer,
// the forbidden one first.
func TestMixedAnswers(t *testing.T) {
	answers := dnstest.Fixed(map[string][]string{"mixed.test": {forbiddenIP, allowedIP}})
	for _, by := range []string{"policy", "routes"} {
		t.Run(by, func(t *testing.T) {
			var rules []route.Rule
			if by == "routes" {
				rules = []route.Rule{
					{Match: route.Match{CIDRs: []netip.Prefix{netip.MustParsePrefix(allowedIP + "/32")}}, Action: route.Direct, Source: "test DIRECT_CIDRS"},
					{Match: route.Match{Any: true}, Action: route.Deny, Source: "test default deny"},
				}
			}
			g := startGateway(t, rules, answers)
			if by == "policy" {
				g.policy(t, "mixed", "  default: deny\n  egress:\n  - {action: allow, cidrs: ["+allowedIP+"/32]}\n")
			}
			forbidden, allowed, port := origins(t, "")
			for _, kind := range listeners {
				t.Run(kind, func(t *testing.T) {
					src := g.pod("mixed")
					if kind == "transparent" {
						// The name resolves to the original address, but the
						// rule approves only the other one: refused.
						body, _ := g.get(t, kind, src, "", "mixed.test", addrPort(forbiddenIP, port))
						if body != "" {
							t.Errorf("a Host naming mixed.test towards %s got %q", forbiddenIP, body)
						}
						want := map[string]string{"error": "http_request_denied"}
						if by == "policy" {
							want["dest"] = "mixed.test" // routes: the address's own deny wins first
						}
						wantFields(t, g.line(t, kind, src), want)
						src = g.pod("mixed")
						if body, st := g.get(t, kind, src, "", "mixed.test", addrPort(allowedIP, port)); body != "hello from allowed" {
							t.Errorf("towards the approved address: %q %d", body, st)
						}
					} else if body, st := g.get(t, kind, src, "mixed.test:"+port, "mixed.test:"+port, netip.AddrPort{}); body != "hello from allowed" {
						t.Errorf("got %q (status %d), want the allowed origin", body, st)
					}
					if forbidden.reached() {
						t.Errorf("the forbidden address %s was reached (%d connections)", forbiddenIP, forbidden.conns.Load())
					}
				})
			}
			if allowed.conns.Load() == 0 {
				t.Error("the allowed origin was never reached")
			}
		})
	}
}

// TestPooledConnectionApproved (issue 21, finding 2): a kept-alive origin
// connection is reused only for a request whose decision approves the
// address it goes to. A workload allowed everything fetches mixed.test
// (the gateway dials its first answer, the forbidden address, and keeps
// the connection); then a workload allowed only the other address fetches
// the same URL and must not get the pooled connection.
func TestPooledConnectionApproved(t *testing.T) {
	g := startGateway(t, nil, dnstest.Fixed(map[string][]string{"mixed.test": {forbiddenIP, allowedIP}}))
	g.policy(t, "open", "  default: allow\n  egress: []\n")
	g.policy(t, "narrow", "  default: deny\n  egress:\n  - {action: allow, cidrs: ["+allowedIP+"/32]}\n")
	forbidden, _, port := origins(t, "")
	dest := "mixed.test:" + port
	fetch := func(src string) string {
		c := dialFrom(t, src, g.http)
		defer c.Close()
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := fetch(g.pod("open")); got != "hello from forbidden" {
		t.Fatalf("the open workload got %q, want the first answer's origin", got)
	}
	if got := fetch(g.pod("narrow")); got != "hello from allowed" {
		t.Errorf("the narrow workload got %q through a pooled connection", got)
	}
	if n := forbidden.conns.Load(); n != 1 {
		t.Errorf("the forbidden origin had %d connections, want the open workload's 1", n)
	}
}

// TestRebinding (issue 21, finding 2): a policy's deny CIDR is not a DNS
// rebinding race. The name answers the allowed address to its first lookup
// and the denied one to every later lookup (TTL 0): the decision and the
// dial use one answer, so the denied address is never dialled. Before the
// fix the policy judged the first answer and the dial resolved again.
func TestRebinding(t *testing.T) {
	answer := func(name string, n int) []netip.Addr {
		if !strings.HasPrefix(name, "rebind-") {
			return nil
		}
		if n == 1 {
			return []netip.Addr{netip.MustParseAddr(allowedIP)}
		}
		return []netip.Addr{netip.MustParseAddr(forbiddenIP)}
	}
	g := startGateway(t, nil, answer)
	g.policy(t, "rebind", "  default: allow\n  egress:\n  - {action: deny, cidrs: ["+forbiddenIP+"/32]}\n")
	forbidden, _, port := origins(t, "")
	for _, kind := range []string{"http", "connect", "socks5"} {
		t.Run(kind, func(t *testing.T) {
			name := "rebind-" + kind + ".test"
			src := g.pod("rebind")
			body, st := g.get(t, kind, src, name+":"+port, name+":"+port, netip.AddrPort{})
			if body != "hello from allowed" {
				t.Errorf("got %q (status %d), want the allowed origin (the one answer judged)", body, st)
			}
			if forbidden.reached() {
				t.Errorf("the denied address %s was reached after the name rebound to it", forbiddenIP)
			}
			if n := g.dns.Asked(name); n != 1 {
				t.Errorf("%s was looked up %d times for one request, want 1", name, n)
			}
		})
	}
}

// TestSniffedNameMustResolveToOriginal (issue 21, finding 1): on the
// transparent listener, a policy that allows only allowed.test is not
// walked around by sending Host: allowed.test (or SNI allowed.test)
// towards another address. The name is accepted only when it resolves to
// the original destination; otherwise the connection is judged — and
// logged — by its address. Before the fix the policy judged the name and
// the connection was dialled to the original address.
func TestSniffedNameMustResolveToOriginal(t *testing.T) {
	g := startGateway(t, nil, dnstest.Fixed(map[string][]string{"allowed.test": {allowedIP}}))
	g.policy(t, "lie", "  default: deny\n  egress:\n  - {action: allow, hosts: [allowed.test]}\n")
	forbidden, allowed, port := origins(t, "")

	t.Run("http", func(t *testing.T) {
		src := g.pod("lie")
		body, st := g.get(t, "transparent", src, "", "allowed.test", addrPort(forbiddenIP, port))
		if body != "" || st != 403 {
			t.Errorf("Host: allowed.test towards %s: %q %d, want a 403", forbiddenIP, body, st)
		}
		wantFields(t, g.line(t, "transparent", src), map[string]string{"dest": forbiddenIP + ":" + port,
			"sniffed_name": "allowed.test", "error": "http_request_denied"})
	})
	t.Run("tls", func(t *testing.T) {
		src := g.pod("lie")
		c, _, _ := g.open(t, "transparent", src, "", addrPort(forbiddenIP, port))
		c.Write(clientHello(t, "allowed.test", nil))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		c.Read(make([]byte, 1)) // closed by the gateway (the origin never answers TLS)
		c.Close()
		wantFields(t, g.line(t, "transparent", src), map[string]string{"dest": forbiddenIP + ":" + port,
			"sniffed_name": "allowed.test", "error": "http_request_denied"})
	})
	if forbidden.reached() {
		t.Errorf("the forbidden address %s was reached with a name that does not resolve to it", forbiddenIP)
	}
	// The truth still passes: the name resolves to the original address.
	src := g.pod("lie")
	if body, st := g.get(t, "transparent", src, "", "allowed.test", addrPort(allowedIP, port)); body != "hello from allowed" {
		t.Errorf("Host: allowed.test towards %s: %q %d", allowedIP, body, st)
	}
	wantFields(t, g.line(t, "transparent", src), map[string]string{"dest": "allowed.test:" + port, "sniffed_name": ""})
	if allowed.conns.Load() == 0 {
		t.Error("the allowed origin was never reached")
	}
}

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

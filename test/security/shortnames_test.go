package security

import (
	"net/netip"
	"strings"
	"testing"

	"egret.io/egret/internal/proxy"
)

// TestShortNamesJudgeWhatIsDialled: a short name the gateway expands for
// the calling pod's namespace (EGRET_SHORT_NAMES=route) is judged by the
// workload's policy as the FQDN it found, and the addresses of that one
// lookup are what is dialled — on the explicit listener, CONNECT and
// SOCKS5, in any spelling (upper case, trailing dot, name.ns, name.ns.svc).
// The name answers the allowed and the forbidden address in turn (DNS
// rebinding) and the policy allows only the allowed address: a request
// either reaches it or is refused, the name looked up once per request; a client that is
// not a known pod gets no expansion of a single label; the transparent
// listener dials the original address whatever Host says.
func TestShortNamesJudgeWhatIsDialled(t *testing.T) {
	const fqdn = "payments.shop.svc.cluster.local"
	var g *gateway
	answer := func(name string, n int) []netip.Addr {
		switch name {
		case fqdn:
			if n%2 == 1 {
				return []netip.Addr{netip.MustParseAddr(allowedIP)}
			}
			return []netip.Addr{netip.MustParseAddr(forbiddenIP)} // rebinding: every other answer
		case "payments", "payments.svc.cluster.local", "payments.cluster.local":
			return []netip.Addr{netip.MustParseAddr(forbiddenIP)} // what a resolver without the pod's search path finds
		}
		return nil
	}
	g = startGateway(t, nil, answer, func(o *proxy.Options) {
		o.ShortNames = proxy.ShortNames{On: true, Route: true}
	})
	// The policy approves the Service's address, not its name: a second
	// lookup between the check and the dial would dial the other answer.
	g.policy(t, "shop", "  default: deny\n  egress:\n  - {action: allow, cidrs: ["+allowedIP+"/32]}\n")
	forbidden, allowed, port := origins(t, "")
	for _, kind := range []string{"http", "connect", "socks5"} {
		for _, name := range []string{"payments", "PAYMENTS", "payments.", "Payments.Shop", "payments.shop.svc", "payments.shop.svc."} {
			t.Run(kind+"/"+name, func(t *testing.T) {
				before := g.dns.Asked(fqdn)
				src := g.pod("shop")
				body, st := g.get(t, kind, src, name+":"+port, name, netip.AddrPort{})
				if body != "hello from allowed" && st != 403 && st != 502 {
					t.Errorf("%s through %s: %q %d, want the allowed origin or a refusal", name, kind, body, st)
				}
				if forbidden.reached() {
					t.Fatalf("%s through %s reached the forbidden address", name, kind)
				}
				if n := g.dns.Asked(fqdn) - before; n > 1 {
					t.Errorf("%s was looked up %d times for one request: what was judged is not what was dialled", fqdn, n)
				}
			})
		}
	}
	if allowed.conns.Load() == 0 {
		t.Error("no short name reached the Service it names")
	}
	t.Run("not-a-pod", func(t *testing.T) {
		// An address no pod has: no namespace, no expansion of a single label.
		for _, kind := range []string{"http", "connect", "socks5"} {
			body, st := g.get(t, kind, "127.93.0.1", "payments:"+port, "payments", netip.AddrPort{})
			if body != "" || st == 200 {
				t.Errorf("%s from an unknown client: %q %d", kind, body, st)
			}
		}
		if forbidden.reached() {
			t.Error("an unknown client's short name reached the forbidden address")
		}
	})
	t.Run("transparent", func(t *testing.T) {
		src := g.pod("shop")
		body, _ := g.get(t, "transparent", src, "", "payments", addrPort(forbiddenIP, port))
		if body != "" {
			t.Errorf("Host payments towards the forbidden address (policy allows only %s): %q", fqdn, body)
		}
		line := g.line(t, "transparent", src)
		if e, _ := line["error"].(string); !strings.Contains(e, "denied") {
			t.Errorf("log: %v", line)
		}
	})
}

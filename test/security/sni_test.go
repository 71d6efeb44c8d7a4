package security

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/dnstest"
)

// helloCases are the ClientHellos of the SNI tests; send writes one to c,
// naming the blocked name but "ok", which names the allowed one.
var helloCases = []struct {
	name string
	send func(t *testing.T, c net.Conn, allowed, blocked string)
}{
	{"ok", func(t *testing.T, c net.Conn, allowed, _ string) { c.Write(clientHello(t, allowed, nil)) }},
	{"mismatch", func(t *testing.T, c net.Conn, _, blocked string) { c.Write(clientHello(t, blocked, nil)) }},
	// 5 bytes, then the rest after the 3 s the check waits.
	{"slow", func(t *testing.T, c net.Conn, _, blocked string) {
		h := clientHello(t, blocked, nil)
		c.Write(h[:5])
		time.Sleep(3500 * time.Millisecond)
		c.Write(h[5:])
	}},
	// Larger than the 16 KiB the check reads: a long ALPN list.
	{"large", func(t *testing.T, c net.Conn, _, blocked string) {
		var alpn []string
		for i := 0; i < 80; i++ {
			alpn = append(alpn, strings.Repeat(string(rune('a'+i%26)), 230)+string(rune('a'+i/26)))
		}
		h := clientHello(t, blocked, alpn)
		if len(h) <= 16<<10 {
			t.Fatalf("the large ClientHello has only %d bytes", len(h))
		}
		c.Write(h)
	}},
	// A ClientHello whose session ID length runs past the message.
	{"malformed", func(t *testing.T, c net.Conn, _, blocked string) {
		h := clientHello(t, blocked, nil)
		h[5+4+2+32] = 0xff
		c.Write(h)
	}},
}

// sink is a TLS port that keeps every byte it receives.
type sink struct {
	mu  sync.Mutex
	got []byte
}

func (s *sink) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(string(s.got), name)
}

// TestSNICheckFailsClosed (issue 21, finding 4): under `sni: enforce`, a
// ClientHello the check cannot read to its end — sent slowly past the
// check's 3 s, larger than 16 KiB, malformed — is a deny, logged with its
// reason, on the CONNECT, SOCKS5 and transparent listeners, and nothing of
// it reaches the destination; under `sni: report` it is logged as
// would_deny and let through. Before the fix the check let through
// whatever the sniffer had not finished (CONNECT), SOCKS5 tunnels were not
// checked at all, and a slow or oversized hello on the transparent
// listener was judged by the address alone.
func TestSNICheckFailsClosed(t *testing.T) {
	testutil.NeedRoot(t) // port 443: the check is for TLS ports
	cdn := map[string]string{"enforce": "203.0.113.10", "report": "203.0.113.11"}
	names := map[string][]string{}
	sinks := map[string]*sink{}
	for mode, ip := range cdn {
		names["allowed-"+mode+".test"] = []string{ip}
		names["blocked-"+mode+".test"] = []string{ip}
		ln, err := listenAt(ip, "443")
		if err != nil {
			t.Fatal(err)
		}
		sk := &sink{}
		sinks[mode] = sk
		testutil.Serve(t, ln, func(c net.Conn) {
			c.SetDeadline(time.Now().Add(20 * time.Second))
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				sk.mu.Lock()
				sk.got = append(sk.got, buf[:n]...)
				sk.mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	g := startGateway(t, nil, dnstest.Fixed(names))
	for mode := range cdn {
		g.policy(t, "sni-"+mode, "  sni: "+mode+"\n  default: allow\n  egress:\n  - {action: deny, hosts: [blocked-"+mode+".test]}\n")
	}
	t.Run("cases", func(t *testing.T) {
		for _, mode := range []string{"enforce", "report"} {
			allowed, blocked := "allowed-"+mode+".test", "blocked-"+mode+".test"
			for _, kind := range []string{"connect", "socks5", "transparent"} {
				for _, hc := range helloCases {
					t.Run(mode+"/"+kind+"/"+hc.name, func(t *testing.T) {
						t.Parallel()
						src := g.pod("sni-" + mode)
						c, _, st := g.open(t, kind, src, allowed+":443", netip.MustParseAddrPort(cdn[mode]+":443"))
						if c == nil {
							t.Fatalf("%s to %s:443 refused (%d)", kind, allowed, st)
						}
						hc.send(t, c, allowed, blocked)
						c.SetReadDeadline(time.Now().Add(8 * time.Second))
						io.Copy(io.Discard, c) // a refused tunnel is closed; the sink never answers
						c.Close()
						line := g.line(t, kind, src)
						switch {
						case hc.name == "ok":
							wantFields(t, line, map[string]string{"error": "", "would_deny": ""})
						case mode == "enforce" || kind == "transparent" && hc.name == "mismatch":
							// On the transparent listener a complete hello is
							// the destination's name: the policy denies it.
							wantFields(t, line, map[string]string{"error": "http_request_denied", "error_detail": "*"})
						default:
							wantFields(t, line, map[string]string{"error": "", "would_deny": "*"})
						}
					})
				}
			}
		}
	})
	if sinks["enforce"].has("blocked-enforce.test") {
		t.Error("a ClientHello naming blocked-enforce.test reached the destination under sni: enforce")
	}
	if !sinks["enforce"].has("allowed-enforce.test") {
		t.Error("the ClientHello naming the allowed name never reached the destination")
	}
	if !sinks["report"].has("blocked-report.test") {
		t.Error("under sni: report nothing naming blocked-report.test got through: report mode must not refuse")
	}
}

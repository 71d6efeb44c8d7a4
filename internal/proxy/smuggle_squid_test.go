package proxy

import (
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil/squid"
)

// TestSmuggleThroughSquid: the request-side attack of
// TestSmuggleRequestConnection through a real Squid that requires egret's
// credential. The smuggled request goes to a host egret denies; open-ended,
// it would take the victim's header (egret's Proxy-Authorization and the
// victim's Authorization with it) and reach that host through Squid. The
// origin must receive exactly the attacker's POST, its body intact, and
// the victim's request, which gets its own answer; neither egret's nor
// Squid's access log may show the smuggled request.
func TestSmuggleThroughSquid(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Squid")
	}
	sq := squid.Start(t, squid.Options{User: memberUser, Password: memberPass,
		Hosts: map[string]string{"origin.test": "127.0.0.1", "forbidden.test": "127.0.0.1"}})
	deny := []route.Rule{{Match: route.Match{Suffixes: []route.Suffix{{Domain: "forbidden.test", Apex: true}}}, Action: route.Deny, Source: "test"}}
	for _, v := range requestConnVariants {
		switch v.name {
		case "content-length", "keep-alive-content-length", "upper-case", "two-lines", "with-end-to-end-field", "host-elsewhere", "everything":
		default:
			continue // the others name no framing field egret writes from the header
		}
		for _, framing := range []string{"length", "chunked"} {
			for _, kind := range payloadKinds {
				t.Run(v.name+"/"+framing+"/"+kind, func(t *testing.T) {
					logStart := len(sq.AccessLog())
					w := startWire(t, nil)
					p := startProxy(t, proxyConf{rules: deny, hosts: originHosts, members: []string{"http://" + memberUser + ":" + memberPass + "@" + sq.Addr},
						timeouts: Timeouts{ResponseHeader: 10 * time.Second}})
					host := "origin.test:" + w.port
					payload := smuggledPayload(kind, "forbidden.test:"+w.port)
					fh, fb := framed(framing, payload)
					attacker := dialWire(t, p.Addr)
					attacker.send("POST http://" + host + "/a HTTP/1.1\r\n" + v.hostField(host) + v.lines +
						"Proxy-Authorization: " + attackerAuth + "\r\n" + fh + "\r\n" + fb)
					resp, _, body := attacker.read("POST")
					wantAnswer(t, "the attacker", resp, body, "POST", "/a")
					victim := dialWire(t, p.Addr)
					victim.send(victimRequest(host))
					resp, _, body = victim.read("GET")
					// Squid serves the requests of one connection in order:
					// anything smuggled before the victim's request has been
					// forwarded by the time the victim has its answer.
					if wantAnswer(t, "the victim", resp, body, "GET", "/victim") {
						sq.WaitLog(t, host+"/victim")
					}
					checkReceived(t, w, hop{name: "squid"}, host, []wantReq{
						{method: "POST", path: "/a", body: payload},
						{method: "GET", path: "/victim", auth: victimAuth},
					}, v.gone...)
					got, _ := w.requests()
					for _, r := range got {
						if strings.Contains(r.host, "forbidden.test") {
							t.Errorf("a request reached forbidden.test, which egret denies: %s", r)
						}
					}
					for _, l := range sq.AccessLog()[logStart:] {
						if strings.Contains(l, ":"+w.port+"/") && (strings.Contains(l, "smuggled") || strings.Contains(l, "forbidden.test")) {
							t.Errorf("Squid served a smuggled request: %s", l)
						}
					}
					if strings.Contains(p.Log.String(), "forbidden.test") {
						t.Errorf("egret logged the smuggled request:\n%s", p.Log.String())
					}
				})
			}
		}
	}
}

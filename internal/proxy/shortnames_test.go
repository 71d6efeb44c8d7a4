package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/socks5"
)

// podsIn identifies every client as a pod of namespace ns ("" unknown)
// and knows the namespaces of known.
type podsIn struct {
	ns    string
	known []string
}

func (w podsIn) Identify(context.Context, netip.Addr, string) (Workload, error) {
	if w.ns == "" {
		return Workload{By: "unknown"}, nil
	}
	return Workload{By: "address", Namespace: w.ns, Pod: "app-1"}, nil
}

func (w podsIn) HasNamespace(ns string) bool {
	for _, k := range w.known {
		if k == ns {
			return true
		}
	}
	return false
}

// countingResolver answers names from its table the first time and an
// address outside loopback every later time (a rebinding name), and counts
// the lookups of each name.
type countingResolver struct {
	mu    sync.Mutex
	names map[string]string
	asked map[string]int
}

func (r *countingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	host = strings.TrimSuffix(host, ".")
	r.asked[host]++
	a, ok := r.names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	if r.asked[host] > 1 {
		return []netip.Addr{netip.MustParseAddr("10.96.0.99")}, nil
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

func (r *countingResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked[host]
}

// shortProxy starts a gateway (ShortNames on) whose clients are pods of
// ns, with routes rules, resolving through r.
func shortProxy(t *testing.T, ns string, route bool, r *countingResolver, rules ...route.Rule) (*rawProxy, string) {
	t.Helper()
	p := startRawWith(t, proxyConf{rules: rules}, func(o *Options) {
		o.Workloads = podsIn{ns: ns, known: []string{"shop", "billing"}}
		o.ShortNames = ShortNames{On: true, Route: route}
		if r != nil {
			o.Resolver = r
		}
	})
	return p, p.socks(t, socks5.Auth{})
}

// socksConnect sends a SOCKS5 CONNECT to name:port on the raw wire and
// returns the reply code and the connection.
func socksConnect(t *testing.T, addr, name string, port uint16) (socks5.ReplyCode, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte{socks5.Version, 1, socks5.MethodNoAuth})
	sel := make([]byte, 2)
	if _, err := io.ReadFull(c, sel); err != nil {
		t.Fatal(err)
	}
	b, err := socks5.AppendRequest(nil, socks5.Request{Command: socks5.Connect, Dest: socks5.Addr{Name: name, Port: port}})
	if err != nil {
		t.Fatal(err)
	}
	c.Write(b)
	reply := make([]byte, 10)
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatalf("read reply: %v", err)
	}
	return socks5.ReplyCode(reply[1]), c
}

// TestShortNamesRefused: by default a gateway answers a short name on
// every listener that takes names with 502, a Proxy-Status naming the
// FQDN and the fix, and an operational log line — and connects nowhere
// (the gateway's own resolver is never asked: resolved there, "payments"
// would be the gateway's namespace's Service).
func TestShortNamesRefused(t *testing.T) {
	var hits sync.Map
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.Host, true)
	}))
	res := &countingResolver{asked: map[string]int{}, names: map[string]string{
		"payments":                        "127.0.0.1", // the gateway's own search path would find this
		"payments.shop.svc.cluster.local": "127.0.0.1",
		"api.test":                        "127.0.0.1",
	}}
	p, socks := shortProxy(t, "shop", false, res)
	fix := "payments.shop.svc.cluster.local"
	for _, tc := range []struct{ name, raw, fqdn string }{
		{"http-single-label", "GET http://payments:" + port + "/ HTTP/1.1\r\nHost: payments:" + port + "\r\n\r\n", fix},
		{"connect-single-label", "CONNECT payments:" + port + " HTTP/1.1\r\nHost: payments:" + port + "\r\n\r\n", fix},
		{"http-name-namespace", "GET http://ledger.billing:" + port + "/ HTTP/1.1\r\nHost: ledger.billing\r\n\r\n", "ledger.billing.svc.cluster.local"},
		{"connect-name-namespace-svc", "CONNECT ledger.billing.svc:443 HTTP/1.1\r\nHost: ledger.billing.svc:443\r\n\r\n", "ledger.billing.svc.cluster.local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawRequest(t, p.Addr, tc.raw)
			wantProxyStatus(t, resp, body, http.StatusBadGateway, string(proxystatus.DestinationNotFound))
			ps := resp.Header.Get("Proxy-Status")
			for _, want := range []string{tc.fqdn, "NO_PROXY", "sidecar"} {
				if !strings.Contains(ps, want) || !strings.Contains(body, want) {
					t.Errorf("Proxy-Status %q / body %q: want %q named", ps, body, want)
				}
			}
		})
	}
	t.Run("socks5-single-label", func(t *testing.T) {
		if code, _ := socksConnect(t, socks, "payments", 443); code != socks5.HostUnreachable {
			t.Errorf("reply %v, want host unreachable", code)
		}
		wantFields(t, p.logLine(t, metrics.KindSOCKS, "payments:443"), map[string]string{"error": "destination_not_found", "status": "502"})
	})
	t.Run("other-names-pass", func(t *testing.T) {
		// Two labels that are not a known namespace: an ordinary name.
		resp, body := rawRequest(t, p.Addr, "GET http://api.test:"+port+"/ HTTP/1.1\r\nHost: api.test\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("api.test: %d %s", resp.StatusCode, body)
		}
	})
	if _, ok := hits.Load("payments:" + port); ok {
		t.Error("a refused short name reached the origin")
	}
	for _, n := range []string{"payments", "payments.shop.svc.cluster.local", "ledger.billing"} {
		if c := res.count(n); c != 0 {
			t.Errorf("the gateway resolved %s %d times for a refused short name", n, c)
		}
	}
	if got := p.notDialled(); len(got) != 0 {
		t.Errorf("dialled %v", got)
	}
	if !strings.Contains(p.Log.String(), `"msg":"short name refused`) || !strings.Contains(p.Log.String(), `"fix":"call it payments.shop.svc.cluster.local`) {
		t.Errorf("no operational log line naming the fix:\n%s", p.Log.String())
	}
}

// TestShortNamesRouted: with EGRET_SHORT_NAMES=route a short name is
// expanded as the calling pod's resolver would, judged as that FQDN by the
// routes, and dialled at the address the one lookup found — on the
// explicit listener, CONNECT and SOCKS5. The resolver answers every
// later lookup with an address outside loopback: a second resolution
// would show as a dial off loopback.
func TestShortNamesRouted(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		io.WriteString(w, "payments")
	}))
	eport := tcpOrigin(t, func(c net.Conn) { io.Copy(c, c) })
	names := map[string]string{
		"payments.shop.svc.cluster.local":  "127.0.0.1",
		"ledger.billing.svc.cluster.local": "127.0.0.1",
		"payments":                         "127.0.0.1", // never asked: the gateway's own answer for the bare name
	}
	deny := route.Rule{Action: route.Deny, Match: route.Match{Hosts: []string{"secret.shop.svc.cluster.local"}}, Source: "test deny"}
	t.Run("http", func(t *testing.T) {
		res := &countingResolver{asked: map[string]int{}, names: names}
		p, _ := shortProxy(t, "shop", true, res)
		resp, body := rawRequest(t, p.Addr, "GET http://payments:"+port+"/x HTTP/1.1\r\nHost: payments:"+port+"\r\n\r\n")
		if resp.StatusCode != 200 || body != "payments" {
			t.Fatalf("payments: %d %q", resp.StatusCode, body)
		}
		mu.Lock()
		got := strings.Join(hosts, ",")
		mu.Unlock()
		if got != "payments:"+port {
			t.Errorf("origin saw Host %q, want the client's payments:%s", got, port)
		}
		if c := res.count("payments.shop.svc.cluster.local"); c != 1 {
			t.Errorf("FQDN resolved %d times, want once", c)
		}
		if c := res.count("payments"); c != 0 {
			t.Errorf("the bare name was resolved at the gateway %d times", c)
		}
		waitFor(t, func() bool {
			return strings.Contains(p.Log.String(), `"dest":"payments.shop.svc.cluster.local:`+port+`","short_name":"payments"`)
		})
	})
	t.Run("connect-name-namespace", func(t *testing.T) {
		res := &countingResolver{asked: map[string]int{}, names: names}
		p, _ := shortProxy(t, "shop", true, res)
		c, br, resp := connect(t, p.Addr, "ledger.billing:"+eport, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		io.WriteString(c, "ping")
		buf := make([]byte, 4)
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("tunnel echo %q, %v", buf, err)
		}
		// The pod's search path: its own namespace first, then svc.<domain>.
		if a, b := res.count("ledger.billing.shop.svc.cluster.local"), res.count("ledger.billing.svc.cluster.local"); a != 1 || b != 1 {
			t.Errorf("lookups: %d of the namespace candidate, %d of the FQDN; want 1 and 1", a, b)
		}
		if got := p.notDialled(); len(got) != 0 {
			t.Errorf("dialled %v: resolved again", got)
		}
	})
	t.Run("socks5", func(t *testing.T) {
		res := &countingResolver{asked: map[string]int{}, names: names}
		p, socks := shortProxy(t, "shop", true, res)
		code, c := socksConnect(t, socks, "payments", mustPort(t, eport))
		if code != socks5.Succeeded {
			t.Fatalf("reply %v", code)
		}
		io.WriteString(c, "pong")
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
			t.Fatalf("tunnel echo %q, %v", buf, err)
		}
		if got := p.notDialled(); len(got) != 0 {
			t.Errorf("dialled %v: resolved again", got)
		}
	})
	t.Run("routes-judge-the-fqdn", func(t *testing.T) {
		res := &countingResolver{asked: map[string]int{}, names: map[string]string{"secret.shop.svc.cluster.local": "127.0.0.1"}}
		p, socks := shortProxy(t, "shop", true, res, deny)
		resp, body := rawRequest(t, p.Addr, "CONNECT secret:"+eport+" HTTP/1.1\r\nHost: secret\r\n\r\n")
		wantProxyStatus(t, resp, body, http.StatusForbidden, string(proxystatus.HTTPRequestDenied))
		if code, _ := socksConnect(t, socks, "secret", 443); code != socks5.NotAllowed {
			t.Errorf("SOCKS5 reply %v, want not allowed", code)
		}
	})
	t.Run("nothing-found", func(t *testing.T) {
		res := &countingResolver{asked: map[string]int{}, names: map[string]string{}}
		p, _ := shortProxy(t, "shop", true, res)
		resp, body := rawRequest(t, p.Addr, "GET http://nope:"+port+"/ HTTP/1.1\r\nHost: nope\r\n\r\n")
		wantProxyStatus(t, resp, body, http.StatusBadGateway, string(proxystatus.DestinationNotFound))
		if !strings.Contains(body, "nope.shop.svc.cluster.local, nope.svc.cluster.local, nope.cluster.local") {
			t.Errorf("body %q does not list the names tried", body)
		}
	})
	t.Run("namespace-unknown", func(t *testing.T) {
		res := &countingResolver{asked: map[string]int{}, names: names}
		p, _ := shortProxy(t, "", true, res)
		resp, body := rawRequest(t, p.Addr, "GET http://payments:"+port+"/ HTTP/1.1\r\nHost: payments\r\n\r\n")
		wantProxyStatus(t, resp, body, http.StatusBadGateway, string(proxystatus.DestinationNotFound))
		if !strings.Contains(body, "payments.NAMESPACE.svc.cluster.local") || !strings.Contains(body, "namespace") {
			t.Errorf("body %q", body)
		}
		if c := res.count("payments"); c != 0 {
			t.Errorf("the bare name was resolved at the gateway")
		}
	})
}

func mustPort(t *testing.T, s string) uint16 {
	t.Helper()
	var p uint16
	if _, err := fmt.Sscan(s, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestShortNameExpansions(t *testing.T) {
	known := func(ns string) bool { return ns == "billing" }
	sn := ShortNames{On: true, Domain: "corp.example."}
	for _, tc := range []struct {
		host, ns string
		want     string
	}{
		{"payments", "shop", "payments.shop.svc.corp.example payments.svc.corp.example payments.corp.example"},
		{"payments", "", "payments.svc.corp.example payments.corp.example"},
		{"ledger.billing", "shop", "ledger.billing.shop.svc.corp.example ledger.billing.svc.corp.example ledger.billing.corp.example"},
		{"ledger.billing.svc", "shop", "ledger.billing.svc.shop.svc.corp.example ledger.billing.svc.svc.corp.example ledger.billing.svc.corp.example"},
		{"example.com", "shop", ""},                     // not a namespace
		{"ledger.billing.svc.corp.example", "shop", ""}, // whole
		{"a.b.c", "shop", ""},
		{"localhost", "shop", ""},
		{"app.localhost", "shop", ""},
	} {
		got := strings.Join(sn.expansions(tc.host, tc.ns, known), " ")
		if got != tc.want {
			t.Errorf("expansions(%q, %q) = %q, want %q", tc.host, tc.ns, got, tc.want)
		}
	}
	if got := (&ShortNames{}).likely("ledger.billing", "shop"); got != "ledger.billing.svc.cluster.local" {
		t.Errorf("likely = %q", got)
	}
}

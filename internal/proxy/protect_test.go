package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
)

// TestSSRFGuard: in the gateway role, loopback, link-local (metadata) and
// the gateway's own addresses are refused on the address actually dialled,
// also when a name resolves there; an allow-listed range is dialled.
func TestSSRFGuard(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	tport := tcpOrigin(t, func(c net.Conn) { hits.Add(1) })
	// Any dial that is not to loopback fails the test before it happens.
	var dials atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().IsLoopback() {
			t.Errorf("egret dialled %s", addr)
			return nil, fmt.Errorf("test: refusing to dial %s", addr)
		}
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	own := netip.MustParseAddr("10.77.0.5") // stands for a pod IP of the gateway
	// An origin on another loopback address, covered by the allow list.
	aln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	allowedSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })}
	go allowedSrv.Serve(aln)
	t.Cleanup(func() { allowedSrv.Close() })
	_, aport, _ := net.SplitHostPort(aln.Addr().String())
	p := startProxyWith(t, proxyConf{
		hosts: map[string]string{"localhost": "127.0.0.1", "evil.test": "127.0.0.1", "meta.test": "169.254.169.254", "self.test": own.String(), "allowed.test": "127.0.0.2"},
	}, func(o *Options) {
		o.DialContext = dial
		o.Protection.Guard = &resolve.Guard{Own: []netip.Addr{own}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	})
	tests := []struct {
		name, raw string
	}{
		{"loopback-literal-connect", "CONNECT 127.0.0.1:" + tport + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"loopback-literal-http", "GET http://127.0.0.1:" + port + "/ HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"ipv6-loopback", "CONNECT [::1]:" + tport + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"localhost-name", "CONNECT localhost:" + tport + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"name-resolving-to-loopback", "GET http://evil.test:" + port + "/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{"metadata-literal", "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"metadata-by-name", "CONNECT meta.test:80 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"own-address", "CONNECT self.test:443 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"unspecified", "CONNECT 0.0.0.0:" + tport + " HTTP/1.1\r\nHost: x\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, p.Addr, tt.raw)
			wantProxyStatus(t, resp, body, http.StatusForbidden, "destination_ip_prohibited")
		})
	}
	if hits.Load() != 0 || dials.Load() != 0 {
		t.Fatalf("a prohibited destination was reached (%d hits, %d dials)", hits.Load(), dials.Load())
	}
	t.Run("allow-listed", func(t *testing.T) {
		resp, _ := rawRequest(t, p.Addr, "GET http://allowed.test:"+aport+"/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		if resp.StatusCode != 200 || hits.Load() != 1 {
			t.Errorf("allowed range: %d, hits %d", resp.StatusCode, hits.Load())
		}
	})
}

// TestSSRFGuardClasses: the gateway refuses every destination class that
// is not global unicast — IPv6 forms that embed a refused IPv4 included —
// on every address a name resolves to, naming the class; a name with mixed
// answers reaches only its allowed addresses; the CIDRs of the direct rule
// that decided are the operator's allow, but never for egret's own address.
func TestSSRFGuardClasses(t *testing.T) {
	aln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "allowed") })}
	go srv.Serve(aln)
	t.Cleanup(func() { srv.Close() })
	_, aport, _ := net.SplitHostPort(aln.Addr().String())
	own := netip.MustParseAddr("10.77.0.5")
	p := startRawWith(t, proxyConf{
		rules: []route.Rule{{Match: route.Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("10.77.0.0/16")}}, Action: route.Direct, Source: "env DIRECT_CIDRS"}},
	}, func(o *Options) {
		o.Resolver = resolve.New(resolve.Config{Hosts: map[string][]netip.Addr{
			"mixed.test":   {netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("127.0.0.2")},
			"private.test": {netip.MustParseAddr("192.168.7.7"), netip.MustParseAddr("fc00::7")},
			"svc.test":     {netip.MustParseAddr("10.96.0.10")},
		}}, nil)
		o.Protection.Guard = &resolve.Guard{Own: []netip.Addr{own, netip.MustParseAddr("93.184.216.34")}, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	})
	for _, tc := range []struct{ target, class string }{
		{"10.1.2.3:443", "private range 10.0.0.0/8"},
		{"172.16.0.1:443", "private range 172.16.0.0/12"},
		{"192.168.1.1:443", "private range 192.168.0.0/16"},
		{"100.64.0.1:443", "100.64.0.0/10"},
		{"100.100.100.200:80", "100.64.0.0/10"},
		{"169.254.169.254:80", "169.254.0.0/16"},
		{"[fd00:ec2::254]:80", "fc00::/7"},
		{"[fc00::1]:443", "fc00::/7"},
		{"[fe80::1]:443", "fe80::/10"},
		{"[64:ff9b::7f00:1]:443", "64:ff9b::/96 embedding loopback 127.0.0.0/8"},
		{"[2002:a9fe:a9fe::1]:80", "2002::/16 embedding link-local 169.254.0.0/16"},
		{"[::ffff:10.0.0.1]:443", "private range 10.0.0.0/8"},
		{"[2001:0:4136:e378:8000:63bf:3fff:fdd2]:443", "2001::/32"},
		{"224.0.0.1:443", "224.0.0.0/4"},
		{"255.255.255.255:443", "255.255.255.255/32"},
		{"240.0.0.1:443", "240.0.0.0/4"},
		{"198.18.0.1:443", "198.18.0.0/15"},
		{"0.0.0.0:443", "unspecified 0.0.0.0/32"},
		{"0.1.2.3:443", "0.0.0.0/8"},
		{"[::]:443", "::/128"},
		{"10.77.0.5:443", "10.77.0.5 is private range 10.0.0.0/8"}, // own, and inside a direct CIDR: still refused
		{"93.184.216.34:443", "own address 93.184.216.34"},
		{"private.test:443", "192.168.0.0/16"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			resp, body := rawRequest(t, p.Addr, "CONNECT "+tc.target+" HTTP/1.1\r\nHost: x\r\n\r\n")
			wantProxyStatus(t, resp, body, http.StatusForbidden, "destination_ip_prohibited")
			if !strings.Contains(body, tc.class) {
				t.Errorf("the refusal does not name %q: %s", tc.class, body)
			}
		})
	}
	if d := p.notDialled(); len(d) != 0 {
		t.Fatalf("egret dialled refused addresses: %v", d)
	}
	t.Run("mixed-answers", func(t *testing.T) {
		resp, body := rawRequest(t, p.Addr, "GET http://mixed.test:"+aport+"/ HTTP/1.1\r\nHost: mixed.test\r\n\r\n")
		if resp.StatusCode != 200 || body != "allowed" {
			t.Fatalf("mixed answers: %d %q", resp.StatusCode, body)
		}
		if d := p.notDialled(); len(d) != 0 {
			t.Errorf("egret dialled the refused answers too: %v", d)
		}
	})
	t.Run("direct-cidr-is-an-allow", func(t *testing.T) {
		// The test's dialer refuses every address off loopback, so a
		// "connection refused" shows the guard let 10.96.0.10 through.
		resp, body := rawRequest(t, p.Addr, "CONNECT svc.test:53 HTTP/1.1\r\nHost: x\r\n\r\n")
		wantProxyStatus(t, resp, body, http.StatusBadGateway, "connection_refused")
		if d := p.notDialled(); len(d) != 1 || d[0] != "10.96.0.10:53" {
			t.Errorf("dialled %v, want 10.96.0.10:53", d)
		}
	})
	if n := counterValue(t, p.Metrics, "egret_proxy_guard_refusals_total", map[string]string{"class": "private"}); n < 5 {
		t.Errorf("guard refusals of class private: %v, want >= 5", n)
	}
	if n := counterValue(t, p.Metrics, "egret_proxy_guard_refusals_total", map[string]string{"class": "own_address"}); n != 1 {
		t.Errorf("guard refusals of class own_address: %v, want 1", n)
	}
}

// TestClientAllowList: clients outside the list get 403 and nothing is
// routed or dialled.
func TestClientAllowList(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	deny := startProxyWith(t, proxyConf{hosts: map[string]string{"o.test": "127.0.0.1"}}, func(o *Options) {
		o.Protection.ClientCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	})
	for _, raw := range []string{"GET http://o.test:" + port + "/ HTTP/1.1\r\nHost: o.test\r\n\r\n", "CONNECT o.test:" + port + " HTTP/1.1\r\nHost: o\r\n\r\n"} {
		resp, body := rawRequest(t, deny.Addr, raw)
		wantProxyStatus(t, resp, body, http.StatusForbidden, "http_request_denied")
		if !strings.Contains(body, "allow-list") {
			t.Errorf("body %q", body)
		}
	}
	allow := startProxyWith(t, proxyConf{hosts: map[string]string{"o.test": "127.0.0.1"}}, func(o *Options) {
		o.Protection.ClientCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8")}
	})
	resp, _ := rawRequest(t, allow.Addr, "GET http://o.test:"+port+"/ HTTP/1.1\r\nHost: o.test\r\n\r\n")
	if resp.StatusCode != 200 || hits.Load() != 1 {
		t.Errorf("allowed client: %d, origin hits %d", resp.StatusCode, hits.Load())
	}
}

// TestReportOnlyDeny: a report-only deny rule logs would_deny and counts it,
// and the request is routed by the rules after it.
func TestReportOnlyDeny(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	p := startProxy(t, proxyConf{
		hosts: map[string]string{"new.blocked.test": "127.0.0.1", "old.blocked.test": "127.0.0.1"},
		rules: []route.Rule{
			{Match: route.Match{Suffixes: []route.Suffix{{Domain: "old.blocked.test", Apex: true}}}, Action: route.Deny, Source: "env DENY_SUFFIXES"},
			{Match: route.Match{Suffixes: []route.Suffix{{Domain: "blocked.test"}}}, Action: route.Deny, Report: true, Source: "env DENY_REPORT_SUFFIXES"},
		},
	})
	resp, _ := rawRequest(t, p.Addr, "GET http://new.blocked.test:"+port+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("report-only rule denied: %d", resp.StatusCode)
	}
	resp, body := rawRequest(t, p.Addr, "GET http://old.blocked.test:"+port+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
	wantProxyStatus(t, resp, body, 403, "http_request_denied")
	// Both log lines (and the metrics counted with them) are written just
	// after the responses went out.
	waitFor(t, func() bool { return strings.Count(p.Log.String(), `"msg":"request"`) >= 2 })
	log := p.Log.String()
	if !strings.Contains(log, `"would_deny":"suffix .blocked.test (env DENY_REPORT_SUFFIXES)"`) {
		t.Errorf("no would_deny in the log:\n%s", log)
	}
	if strings.Count(log, "would_deny") != 1 {
		t.Errorf("would_deny logged for a request that was denied anyway:\n%s", log)
	}
	if v := counter(t, p, "egret_proxy_would_deny_total", nil); v != 1 {
		t.Errorf("would_deny counter %v", v)
	}
}

// TestLimits: per-destination rate and concurrency, per-client
// concurrency, the tunnel limit and the breaker each refuse with the right
// status and Proxy-Status, and count the refusal.
func TestLimits(t *testing.T) {
	release := make(chan struct{})
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	tport := tcpOrigin(t, func(c net.Conn) { <-release })
	t.Cleanup(func() { close(release) }) // before the origins close (cleanups run last first)
	dead := deadAddr(t)
	_, deadPort, _ := net.SplitHostPort(dead)
	p := startProxyWith(t, proxyConf{hosts: map[string]string{"rate.test": "127.0.0.1", "conc.test": "127.0.0.1", "dead.test": "127.0.0.1", "t.test": "127.0.0.1"}},
		func(o *Options) {
			o.Protection.Destinations = &limit.Destinations{Rules: []limit.Rule{
				{Hosts: []string{"rate.test"}, Limit: limit.Limit{Rate: 0.001, Burst: 2}},
				{Hosts: []string{"conc.test"}, Limit: limit.Limit{MaxConcurrent: 1}},
			}}
			o.Protection.Breakers = limit.NewBreakers(limit.BreakerConfig{Failures: 2, OpenFor: time.Hour})
			o.Protection.Tunnels = &limit.Counter{Max: 2}
		})
	get := func(host, path string) (*http.Response, string) {
		return rawRequest(t, p.Addr, "GET http://"+host+":"+port+path+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	}
	t.Run("destination-rate", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			if resp, _ := get("rate.test", "/"); resp.StatusCode != 200 {
				t.Fatalf("within the burst: %d", resp.StatusCode)
			}
		}
		resp, body := get("rate.test", "/")
		wantProxyStatus(t, resp, body, http.StatusTooManyRequests, "connection_limit_reached")
	})
	t.Run("destination-concurrency", func(t *testing.T) {
		go rawRequestNoCheck(p.Addr, "GET http://conc.test:"+port+"/hold HTTP/1.1\r\nHost: conc.test\r\n\r\n")
		waitFor(t, func() bool { return inflight(p) })
		resp, body := get("conc.test", "/")
		wantProxyStatus(t, resp, body, http.StatusServiceUnavailable, "connection_limit_reached")
	})
	t.Run("breaker", func(t *testing.T) {
		target := "dead.test:" + deadPort
		for i := 0; i < 2; i++ {
			resp, body := rawRequest(t, p.Addr, "GET http://"+target+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
			wantProxyStatus(t, resp, body, http.StatusBadGateway, "connection_refused")
		}
		start := time.Now()
		resp, body := rawRequest(t, p.Addr, "GET http://"+target+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
		wantProxyStatus(t, resp, body, http.StatusServiceUnavailable, "destination_unavailable")
		if !strings.Contains(body, "circuit breaker") || time.Since(start) > time.Second {
			t.Errorf("breaker answer %q after %v", body, time.Since(start))
		}
	})
	t.Run("tunnels", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			_, _, resp := connect(t, p.Addr, "t.test:"+tport, "")
			if resp.StatusCode != 200 {
				t.Fatalf("tunnel %d: %d", i, resp.StatusCode)
			}
		}
		resp, body := rawRequest(t, p.Addr, "CONNECT t.test:"+tport+" HTTP/1.1\r\nHost: x\r\n\r\n")
		wantProxyStatus(t, resp, body, http.StatusServiceUnavailable, "connection_limit_reached")
	})
	for _, k := range []string{"destination_rate", "destination_concurrency", "tunnels", "breaker"} {
		if v := counter(t, p, "egret_limit_rejections_total", map[string]string{"limit": k}); v != 1 {
			t.Errorf("rejections{limit=%s} = %v, want 1", k, v)
		}
	}
}

// TestClientConcurrency: one client address cannot hold more than its
// share; its slot is given back when the tunnel ends.
func TestClientConcurrency(t *testing.T) {
	tport := tcpOrigin(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	p := startProxyWith(t, proxyConf{hosts: map[string]string{"t.test": "127.0.0.1"}}, func(o *Options) {
		o.Protection.Clients = &limit.Clients{MaxConcurrent: 1}
	})
	c, _, resp := connect(t, p.Addr, "t.test:"+tport, "")
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	r2, body := rawRequest(t, p.Addr, "CONNECT t.test:"+tport+" HTTP/1.1\r\nHost: x\r\n\r\n")
	wantProxyStatus(t, r2, body, http.StatusTooManyRequests, "connection_limit_reached")
	c.Close()
	waitFor(t, func() bool { return p.OpenTunnels() == 0 })
	_, _, resp = connect(t, p.Addr, "t.test:"+tport, "")
	if resp.StatusCode != 200 {
		t.Fatalf("after the first tunnel ended: %d", resp.StatusCode)
	}
}

// inflight reports whether conc.test's only slot is taken.
func inflight(p *testProxy) bool {
	r, err := p.opts.Protection.Destinations.Acquire("conc.test")
	if err != nil {
		return true
	}
	if r != nil {
		r()
	}
	return false
}

// rawRequestNoCheck sends raw and reads the answer, for a goroutine.
func rawRequestNoCheck(addr, raw string) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, raw)
	io.ReadAll(c)
}

// counter sums a metric's samples whose labels include want.
func counter(t *testing.T, p *testProxy, name string, want map[string]string) float64 {
	mfs, err := p.Metrics.Registry.Gather()
	if err != nil && t != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if m.Counter != nil {
				sum += m.Counter.GetValue()
			} else if m.Gauge != nil {
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

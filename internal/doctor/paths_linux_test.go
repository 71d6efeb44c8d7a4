//go:build linux

package doctor

import (
	"context"
	"encoding/json"

	"strings"
	"testing"
	"time"
)

// runReport runs the doctor in the lab's pod and fails t on a usage error.
func (l *lab) runReport(t *testing.T, o Options, env []string) *Report {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Second
	}
	rep, err := RunReport(context.Background(), o, l.deps(t, env, nil))
	if err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return rep
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := json.MarshalIndent(rep, "", "  ")
			t.Logf("report:\n%s", b)
		}
	})
	return rep
}

func mustFind(t *testing.T, outs []Outcome, key string) Outcome {
	t.Helper()
	o, ok := find(outs, key)
	if !ok {
		t.Fatalf("no check %q", key)
	}
	return o
}

func contains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s %q lacks %q", what, s, sub)
		}
	}
}

// TestDoctorFourPaths: the runbook's four paths in the lab's pod, with
// real egret gateways, echo servers and a forbidden destination whose
// direct path a routing rule prohibits (what a NetworkPolicy does): the
// Service reached directly, an intranet name reached directly, the outside
// through the proxy, and the forbidden target refused by the proxy's deny
// rule and by the network. A forbidden target the proxy lets through, or
// one reachable directly, fails with the fix.
func TestDoctorFourPaths(t *testing.T) {
	l := newLab(t)
	api := "kubernetes.default.svc:" + l.apiPort
	intranet := "http://wiki.corp.test:" + l.apiPort + "/"
	forbidden := "http://forbidden.example.test:" + l.dualPort + "/"
	leaky := "http://leaky.example.test:" + l.dualPort + "/"
	np := fullNoProxy + ",.corp.test"

	t.Run("all-four-pass", func(t *testing.T) {
		rep := l.runReport(t, Options{Echo: l.echoURL, Internal: []string{api}, Intranet: []string{intranet}, Forbidden: []string{forbidden}},
			proxyEnv("http://"+l.policyGateway, np))
		for _, o := range rep.Checks {
			if o.Status != Pass {
				t.Errorf("%s %s: %s: %s", o.Name, o.Target, o.Status, o.Summary)
			}
		}
		f := mustFind(t, rep.Checks, "forbidden")
		contains(t, "forbidden summary", f.Summary, "forbidden.example.test:"+l.dualPort+" is blocked on every path: direct, through http://"+l.policyGateway)
		contains(t, "forbidden details", strings.Join(f.Details, "\n"), "blocked: no route (connect to "+forbiddenIP+":", "refused by the proxy's policy: 403 Forbidden, http_request_denied")
		for p, want := range map[string]string{PathServiceDirect: "pass", PathIntranetDirect: "pass", PathOutsideViaProxy: "pass", PathForbidden: "pass"} {
			if got := rep.Record.Paths[p]; got != want {
				t.Errorf("record path %s = %q, want %q", p, got, want)
			}
		}
		if d := mustFind(t, rep.Checks, "direct "+intranet); d.Path != PathIntranetDirect {
			t.Errorf("the intranet check's path is %q", d.Path)
		}
		var codes []int
		for _, e := range rep.Record.Exchanges {
			if e.Check == "forbidden" && e.Way == "proxy" {
				codes = append(codes, e.Status)
			}
		}
		if len(codes) != 1 || codes[0] != 403 {
			t.Errorf("recorded forbidden status codes through the proxy %v, want [403]", codes)
		}
	})
	t.Run("proxy-lets-it-through", func(t *testing.T) {
		rep := l.runReport(t, Options{Echo: l.echoURL, Internal: []string{api}, Forbidden: []string{forbidden}}, proxyEnv("http://"+l.gateway, fullNoProxy))
		f := mustFind(t, rep.Checks, "forbidden")
		if f.Status != Fail {
			t.Fatalf("forbidden: %s: %s", f.Status, f.Summary)
		}
		contains(t, "summary", f.Summary, "the proxy lets forbidden.example.test:"+l.dualPort+" through", "its policy does not block it")
		contains(t, "advice", f.Advice, "deny rule")
		if rep.Record.Paths[PathForbidden] != "fail" {
			t.Errorf("record: forbidden path %q", rep.Record.Paths[PathForbidden])
		}
	})
	t.Run("reachable-directly", func(t *testing.T) {
		rep := l.runReport(t, Options{Echo: l.echoURL, Internal: []string{api}, Forbidden: []string{leaky}}, proxyEnv("http://"+l.policyGateway, fullNoProxy))
		f := mustFind(t, rep.Checks, "forbidden")
		if f.Status != Fail {
			t.Fatalf("forbidden: %s: %s", f.Status, f.Summary)
		}
		contains(t, "summary", f.Summary, "leaky.example.test:"+l.dualPort+" is reachable directly", "egress does not go only through the proxy")
		contains(t, "advice", f.Advice, "NetworkPolicy")
	})
	t.Run("no-proxy-entry-sends-it-direct", func(t *testing.T) {
		// NO_PROXY covers the forbidden name: the runtimes go direct, and
		// only the network blocks it - still blocked, and said so.
		rep := l.runReport(t, Options{Echo: l.echoURL, Internal: []string{api}, Forbidden: []string{forbidden}, Clients: []string{"go", "curl"}},
			proxyEnv("http://"+l.policyGateway, fullNoProxy+",forbidden.example.test"))
		f := mustFind(t, rep.Checks, "forbidden")
		if f.Status != Pass {
			t.Fatalf("forbidden: %s: %s", f.Status, f.Summary)
		}
		contains(t, "details", strings.Join(f.Details, "\n"), "runtimes that go direct to it (NO_PROXY or no proxy variable): go and curl")
	})
}

// TestDoctorEgressFamiliesAndSamples: a dual-stack echo destination is
// sampled over IPv4 and IPv6 separately, several times, through a real
// egret gateway and directly; the egress addresses are compared with the
// expected ones, and every request is in the run record.
func TestDoctorEgressFamiliesAndSamples(t *testing.T) {
	l := newLab(t)
	api := "kubernetes.default.svc:" + l.apiPort
	dual := "http://dual.example.test:" + l.dualPort + "/"
	env := proxyEnv("http://"+l.policyGateway, fullNoProxy)

	t.Run("both-families-three-samples", func(t *testing.T) {
		rep := l.runReport(t, Options{Echo: dual, Internal: []string{api}, Samples: 3, ExpectEgressIP: []string{gwInetIP, "fd77:2::/64"}}, env)
		e := mustFind(t, rep.Checks, "egress-ip")
		if e.Status != Pass {
			t.Fatalf("egress-ip: %s: %s", e.Status, e.Summary)
		}
		contains(t, "summary", e.Summary,
			"IPv4: egress IP through the proxy: "+gwInetIP+" (3 of 3 samples) (expected); direct: "+podIP+" (3 of 3 samples)",
			"IPv6: egress IP through the proxy: "+gwInetIP6+" (3 of 3 samples) (expected); direct: "+podIP6)
		n := map[string]int{}
		for _, x := range rep.Record.Exchanges {
			if x.Check == "egress-ip" {
				n[x.Way+x.Family]++
				if x.Status != 200 || x.EgressIP == "" {
					t.Errorf("exchange %+v: want 200 with an egress IP", x)
				}
			}
		}
		for _, k := range []string{"direct4", "direct6", "proxy4", "proxy6"} {
			if n[k] != 3 {
				t.Errorf("%d %s exchanges recorded, want 3 (%v)", n[k], k, n)
			}
		}
		if got := strings.Join(rep.Record.EgressIPs.Proxy, ","); got != gwInetIP+","+gwInetIP6 {
			t.Errorf("record egress_ips.proxy %q", got)
		}
		var dns []string
		for _, a := range rep.Record.DNS {
			if a.Name == "dual.example.test" {
				dns = a.Addrs
			}
		}
		if strings.Join(dns, ",") != inetIP+","+inetIP6 {
			t.Errorf("record DNS answer for dual.example.test: %q", dns)
		}
	})
	t.Run("unexpected-egress-ip", func(t *testing.T) {
		rep := l.runReport(t, Options{Echo: dual, Internal: []string{api}, Family: "4", ExpectEgressIP: []string{"192.0.2.7"}}, env)
		e := mustFind(t, rep.Checks, "egress-ip")
		if e.Status != Fail {
			t.Fatalf("egress-ip: %s: %s", e.Status, e.Summary)
		}
		contains(t, "summary", e.Summary, "egress IP through the proxy "+gwInetIP+" is not the expected 192.0.2.7")
		if strings.Contains(e.Summary, "IPv6") {
			t.Errorf("--family 4 sampled IPv6: %q", e.Summary)
		}
	})
	t.Run("family-6-only-and-second-echo", func(t *testing.T) {
		rep := l.runReport(t, Options{Echo: dual, SecondEcho: "http://echo6.example.test:" + l.dualPort + "/", Internal: []string{api}, Family: "6"}, env)
		e := mustFind(t, rep.Checks, "egress-ip")
		if e.Status != Pass {
			t.Fatalf("egress-ip: %s: %s", e.Status, e.Summary)
		}
		contains(t, "summary", e.Summary, "dual.example.test:"+l.dualPort+" IPv6: egress IP through the proxy: "+gwInetIP6,
			"echo6.example.test:"+l.dualPort+" IPv6: egress IP through the proxy: "+gwInetIP6)
	})
	t.Run("ipv6-only-echo-forced-ipv4", func(t *testing.T) {
		rep := l.runReport(t, Options{Echo: "http://echo6.example.test:" + l.dualPort + "/", Internal: []string{api}, Family: "4"}, env)
		e := mustFind(t, rep.Checks, "egress-ip")
		if e.Status != Warn {
			t.Fatalf("egress-ip: %s: %s", e.Status, e.Summary)
		}
		contains(t, "summary", e.Summary, "echo6.example.test has no IPv4 address here: not sampled")
	})
}

//go:build linux

package doctor

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"
)

// proxyEnv sets the proxy variables in both cases, NO_PROXY to np, and
// what Node and the API server variable need.
func proxyEnv(proxy, np string) []string {
	return []string{
		"HTTP_PROXY=" + proxy, "http_proxy=" + proxy, "HTTPS_PROXY=" + proxy, "https_proxy=" + proxy,
		"NO_PROXY=" + np, "no_proxy=" + np, "NODE_USE_ENV_PROXY=1", "KUBERNETES_SERVICE_HOST=" + apiIP, "HOME=/root",
	}
}

// want is what one planted fault must produce: the checks that fail, and
// substrings of the failing check's summary and advice.
type want struct {
	check   string // the check that pinpoints the fault ("name target-prefix")
	summary []string
	advice  []string
}

// TestDoctorPinpointsPlantedFaults runs the doctor inside the lab's pod
// against real egret gateways, a real Squid with Basic auth, an egret
// sidecar and an egret echo server, with one fault planted per case. The
// doctor must fail exactly the checks the fault explains and say what to
// do; the clean setups must pass every check.
func TestDoctorPinpointsPlantedFaults(t *testing.T) {
	l := newLab(t)
	api := "kubernetes.default.svc:" + l.apiPort
	tests := []struct {
		name     string
		env      []string
		pid1     []string // nil: the same as env
		internal []string // nil: api
		echo     string   // "": the lab's echo server
		timeout  time.Duration
		failing  []string // names of the failing checks (with target prefix where needed), sorted
		want     []want
	}{
		{name: "clean-egret-gateway", env: proxyEnv("http://"+l.gateway, fullNoProxy)},
		{name: "clean-squid-with-credentials", env: proxyEnv("http://"+squidUser+":"+squidPass+"@"+l.squid, fullNoProxy)},
		{name: "squid-wrong-password", env: proxyEnv("http://"+squidUser+":"+wrongPass+"@"+l.squid, fullNoProxy),
			failing: []string{"egress-ip", "proxy"},
			want: []want{{check: "proxy", summary: []string{`rejected the credentials of user "alice"`, "407"}, advice: []string{"Fix the password in HTTP_PROXY"}},
				{check: "egress-ip", summary: []string{"cannot be reached through the proxy", "407"}}}},
		{name: "sidecar-upstream-wrong-password", env: proxyEnv("http://"+l.sidecar, fullNoProxy),
			failing: []string{"egress-ip", "proxy"},
			want: []want{{check: "proxy", summary: []string{"egret at http://" + l.sidecar, "its upstream http://" + gwPodSideIP + ":", "rejected egret's credentials"},
				advice: []string{"Fix the credentials the egret proxy holds", "not the app's variables"}}}},
		{name: "no-proxy-missing-svc", env: proxyEnv("http://"+l.gateway, "localhost,127.0.0.1,::1,[::1],.cluster.local,169.254.169.254,"+apiIP),
			failing: []string{"no-proxy", "runtimes " + api},
			want: []want{{check: "runtimes " + api, summary: []string{"NO_PROXY hole", "would send kubernetes.default.svc to the proxy: NO_PROXY lacks .svc", "502", "destination_not_found"},
				advice: []string{"Add .svc to NO_PROXY and no_proxy"}},
				{check: "no-proxy", summary: []string{"NO_PROXY misses cluster destinations"}, advice: []string{".svc", "kubernetes.default.svc"}}}},
		{name: "dead-gateway-refused", env: proxyEnv("http://egret-gateway.egress:"+l.deadPort, fullNoProxy),
			failing: []string{"egress-ip", "proxy"},
			want:    []want{{check: "proxy", summary: []string{"refused", "nothing listens on that port, or a NetworkPolicy rejects it"}, advice: []string{"Check the port in HTTP_PROXY"}}}},
		{name: "dead-gateway-blackholed-timeout", env: proxyEnv("http://dead-gateway.egress:3128", fullNoProxy), timeout: time.Second,
			failing: []string{"egress-ip", "proxy"},
			want:    []want{{check: "proxy", summary: []string{"no answer from the proxy", "timeout", "a route or a NetworkPolicy drops the traffic"}, advice: []string{"NetworkPolicy"}}}},
		{name: "deny-rule", env: proxyEnv("http://"+l.denyGateway, fullNoProxy),
			failing: []string{"egress-ip", "proxy"},
			want:    []want{{check: "proxy", summary: []string{"refuses echo.example.test:", "by policy", "403 http_request_denied"}, advice: []string{"before the deny rule"}}}},
		{name: "dead-target-behind-the-proxy", env: proxyEnv("http://"+l.gateway, fullNoProxy), echo: "http://echo.example.test:" + l.deadEchoPort + "/",
			failing: []string{"egress-ip", "proxy"},
			want: []want{{check: "proxy", summary: []string{"dead target", "nothing listens there", "connection refused"}, advice: []string{"the proxy path works"}},
				{check: "egress-ip", summary: []string{"cannot be reached through the proxy", "dead target"}}}},
		{name: "shell-differs-from-pid1", env: proxyEnv("http://"+l.gateway, fullNoProxy),
			pid1:    []string{"HTTP_PROXY=http://" + l.gateway, "NO_PROXY=.cluster.local", "KUBERNETES_SERVICE_HOST=" + apiIP},
			failing: []string{"pid1-env"},
			want: []want{{check: "pid1-env", summary: []string{"NO_PROXY differs", "https_proxy is set in this shell but not for PID 1", "NODE_USE_ENV_PROXY is set in this shell but not for PID 1"},
				advice: []string{"pod spec"}}}},
		{name: "unknown-and-unreachable-services", env: proxyEnv("http://"+l.gateway, fullNoProxy), timeout: time.Second,
			internal: []string{api, "nosuch.shop.svc:80", "blocked:8080"},
			failing:  []string{"direct blocked:8080", "direct nosuch.shop.svc:80", "dns nosuch.shop.svc", "runtimes blocked:8080"},
			want: []want{{check: "dns nosuch.shop.svc", summary: []string{"does not exist in the cluster DNS"}, advice: []string{"Service name and namespace"}},
				// A short name and a ClusterIP that NO_PROXY does not list.
				{check: "runtimes blocked:8080", summary: []string{"would send blocked to the proxy: NO_PROXY lacks blocked", "502 Bad Gateway, destination_not_found",
					"would send " + holeSvcIP + " to the proxy: NO_PROXY lacks " + holeSvcIP},
					advice: []string{"blocked," + holeSvcIP, "blocked.shop.svc", "CIDR"}},
				{check: "direct blocked:8080", summary: []string{"blocked", "blocked.shop.svc.cluster.local", holeSvcIP, "no answer (timeout)"}, advice: []string{"NetworkPolicy"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			internal := tt.internal
			if internal == nil {
				internal = []string{api}
			}
			o := Options{Echo: orDefault(tt.echo, l.echoURL), Internal: internal, Timeout: tt.timeout}
			if o.Timeout == 0 {
				o.Timeout = 3 * time.Second
			}
			outs, err := Run(context.Background(), o, l.deps(t, tt.env, tt.pid1))
			if err != nil {
				t.Fatal(err)
			}
			report, _ := json.MarshalIndent(outs, "", "  ")
			var failing []string
			for _, out := range outs {
				if out.Status == Fail {
					failing = append(failing, strings.TrimSpace(out.Name+" "+out.Target))
				}
				if len(tt.failing) == 0 && out.Status != Pass {
					t.Errorf("clean setup: %s %s is %s: %s", out.Name, out.Target, out.Status, out.Summary)
				}
			}
			sort.Strings(failing)
			if !matchPrefixes(failing, tt.failing) {
				t.Errorf("failing checks %q, want %q", failing, tt.failing)
			}
			for _, w := range tt.want {
				out, ok := find(outs, w.check)
				if !ok {
					t.Errorf("no check %q", w.check)
					continue
				}
				for _, s := range w.summary {
					if !strings.Contains(out.Summary, s) {
						t.Errorf("%s: summary %q lacks %q", w.check, out.Summary, s)
					}
				}
				for _, s := range w.advice {
					if !strings.Contains(out.Advice, s) {
						t.Errorf("%s: advice %q lacks %q", w.check, out.Advice, s)
					}
				}
			}
			for _, secret := range []string{squidPass, wrongPass} {
				if strings.Contains(string(report), secret) {
					t.Errorf("a proxy password appears in the report")
				}
			}
			if t.Failed() {
				t.Logf("report:\n%s", report)
			}
		})
	}
	t.Run("egress-ip-differs-as-expected", func(t *testing.T) {
		outs, err := Run(context.Background(), Options{Echo: l.echoURL, Internal: []string{api}}, l.deps(t, proxyEnv("http://"+l.gateway, fullNoProxy), nil))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := find(outs, "egress-ip")
		if want := "egress IP through the proxy: " + gwInetIP + "; direct: " + podIP; !strings.Contains(out.Summary, want) {
			t.Errorf("egress-ip: %q, want %q", out.Summary, want)
		}
		dir, _ := find(outs, "direct")
		for _, s := range []string{"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", apiIP} {
			if !strings.Contains(dir.Summary, s) {
				t.Errorf("direct check did not reach %s: %q", s, dir.Summary)
			}
		}
	})
}

// matchPrefixes reports whether got and want have the same length and each
// got[i] starts with want[i] (targets may carry ports).
func matchPrefixes(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !strings.HasPrefix(got[i], want[i]) {
			return false
		}
	}
	return true
}

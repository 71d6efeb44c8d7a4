package policy

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/route"
)

// parse reads a policy written as YAML (the shape kubectl applies).
func parse(t testing.TB, doc string) *EgressPolicy {
	t.Helper()
	var p EgressPolicy
	if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
		t.Fatalf("policy YAML: %v\n%s", err, doc)
	}
	return &p
}

func TestCompileRefusals(t *testing.T) {
	pools := func(n string) bool { return n == "critical" || n == "background" }
	for _, tc := range []struct {
		name, doc string
		cluster   bool
		want      string // "" = valid
		reason    string
	}{
		{name: "valid", doc: `
metadata: {name: p, namespace: ns}
spec:
  podSelector: {matchLabels: {app: a}}
  egress:
  - {action: allow, hosts: [api.example.com], ports: [443], pool: critical}
  - {action: deny, suffixes: [.evil.example]}
  - {action: allow, cidrs: [203.0.113.0/24, 198.51.100.7]}
  limits: {requests: 10, unit: minute, maxConcurrent: 3}
  sni: enforce`},
		{name: "bad-mode", doc: `{metadata: {name: p, namespace: ns}, spec: {mode: audit}}`, want: `mode "audit"`},
		{name: "bad-action", doc: `{metadata: {name: p, namespace: ns}, spec: {egress: [{action: permit, hosts: [a.example]}]}}`, want: `action "permit"`},
		{name: "empty-rule", doc: `{metadata: {name: p, namespace: ns}, spec: {egress: [{action: allow}]}}`, want: "matches nothing"},
		{name: "bad-host", doc: `{metadata: {name: p, namespace: ns}, spec: {egress: [{action: allow, hosts: ["a b"]}]}}`, want: `host "a b"`},
		{name: "bad-cidr", doc: `{metadata: {name: p, namespace: ns}, spec: {egress: [{action: allow, cidrs: [10.0.0.0/33]}]}}`, want: `cidr "10.0.0.0/33"`},
		{name: "bad-port", doc: `{metadata: {name: p, namespace: ns}, spec: {egress: [{action: allow, ports: [0]}]}}`, want: "port 0"},
		{name: "unknown-pool", doc: `{metadata: {name: p, namespace: ns}, spec: {pool: fast}}`, want: `pool "fast" does not exist`, reason: ReasonUnknownPool},
		{name: "unknown-rule-pool", doc: `{metadata: {name: p, namespace: ns}, spec: {egress: [{action: allow, hosts: [a.example], pool: fast}]}}`, want: `pool "fast"`, reason: ReasonUnknownPool},
		{name: "deny-with-pool", doc: `{metadata: {name: p, namespace: ns}, spec: {egress: [{action: deny, hosts: [a.example], pool: critical}]}}`, want: "a deny rule has no pool"},
		{name: "bad-default", doc: `{metadata: {name: p, namespace: ns}, spec: {default: maybe}}`, want: `default "maybe"`},
		{name: "bad-unit", doc: `{metadata: {name: p, namespace: ns}, spec: {limits: {requests: 1, unit: day}}}`, want: `limits.unit "day"`},
		{name: "negative-limit", doc: `{metadata: {name: p, namespace: ns}, spec: {limits: {requests: -1}}}`, want: "not negative"},
		{name: "bad-sni", doc: `{metadata: {name: p, namespace: ns}, spec: {sni: strict}}`, want: `sni "strict"`},
		{name: "bad-selector", doc: `{metadata: {name: p, namespace: ns}, spec: {podSelector: {matchExpressions: [{key: app, operator: Near}]}}}`, want: "podSelector"},
		{name: "cluster-not-default", doc: `{metadata: {name: other}, spec: {}}`, cluster: true, want: `only the ClusterEgressPolicy named "default"`, reason: ReasonNotDefault},
		{name: "cluster-with-selector", doc: `{metadata: {name: default}, spec: {podSelector: {matchLabels: {a: b}}}}`, cluster: true, want: "a ClusterEgressPolicy selects no pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compile(parse(t, tc.doc), tc.cluster, pools)
			if tc.want == "" {
				if c.Err != nil {
					t.Fatalf("refused: %v", c.Err)
				}
				if cond := Condition(c); cond.Status != metav1.ConditionTrue {
					t.Errorf("condition %+v", cond)
				}
				return
			}
			if c.Err == nil || !strings.Contains(c.Err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", c.Err, tc.want)
			}
			reason := tc.reason
			if reason == "" {
				reason = ReasonInvalid
			}
			cond := Condition(c)
			if cond.Status != metav1.ConditionFalse || cond.Reason != reason || !strings.Contains(cond.Message, tc.want) {
				t.Errorf("condition %+v, want False/%s mentioning %q", cond, reason, tc.want)
			}
			// An invalid policy opens nothing: it denies everything.
			if len(c.allows) != 0 || c.def != route.Deny || len(c.denies) != 1 || !c.denies[0].Match.Any {
				t.Errorf("invalid policy compiled to allows %v, default %v, denies %v", c.allows, c.def, c.denies)
			}
		})
	}
}

// world is a set of policies and pods for the precedence table.
type world struct {
	e *Engine
}

func newWorld(t testing.TB, docs ...string) *world {
	t.Helper()
	w := &world{e: &Engine{Pods: identity.NewPods()}}
	var ps, cps []*EgressPolicy
	for _, d := range docs {
		p := parse(t, d)
		if p.Namespace == "" {
			cps = append(cps, p)
		} else {
			ps = append(ps, p)
		}
	}
	w.e.Replace(ps, cps)
	return w
}

func (w *world) pod(ns, name, ip string, labels map[string]string) {
	w.e.Pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: "sa"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}})
}

// decide returns the verdict for the client at ip: "deny", "allow",
// "allow:<pool>" or "would_deny", and the deciding rule.
func (w *world) decide(t testing.TB, ip, dest string) (string, string) {
	t.Helper()
	wl, err := w.e.Identify(context.Background(), netip.MustParseAddr(ip), "")
	if err != nil {
		t.Fatal(err)
	}
	if wl.Rules == nil {
		return "allow", "(no policy)"
	}
	d, err := route.ParseDest(dest, 0)
	if err != nil {
		t.Fatal(err)
	}
	dec := wl.Rules.Decide(context.Background(), d, nil)
	switch {
	case dec.Action == route.Deny:
		return "deny", dec.Detail()
	case dec.WouldDeny != "":
		return "would_deny", dec.WouldDeny
	case dec.Action == route.Upstream:
		return "allow:" + dec.Pool, dec.Detail()
	}
	return "allow", dec.Detail()
}

// TestPrecedence is the documented order (docs/policy.md): any matching
// deny of an applicable policy wins, the cluster default's too; then the
// most specific selector decides; then the cluster default; report-only
// policies change no verdict.
func TestPrecedence(t *testing.T) {
	const (
		nsWide = `
metadata: {name: ns-wide, namespace: shop}
spec:
  egress:
  - {action: allow, suffixes: [.corp.example]}
  - {action: deny, hosts: [blocked.example]}`
		payments = `
metadata: {name: payments, namespace: shop}
spec:
  podSelector: {matchLabels: {app: payments}}
  pool: critical
  egress:
  - {action: allow, hosts: [api.stripe.example], ports: [443]}`
		paymentsCanary = `
metadata: {name: payments-canary, namespace: shop}
spec:
  podSelector: {matchLabels: {app: payments, track: canary}}
  egress:
  - {action: allow, hosts: [api.stripe.example, new.stripe.example]}`
		reportOnly = `
metadata: {name: tighten, namespace: shop}
spec:
  mode: report
  podSelector: {matchLabels: {app: payments, track: canary, extra: "1"}}
  default: allow
  egress:
  - {action: deny, hosts: [new.stripe.example]}`
		clusterDefault = `
metadata: {name: default}
spec:
  default: allow
  pool: background
  egress:
  - {action: deny, cidrs: [169.254.169.254/32]}
  - {action: deny, hosts: [exfil.example]}`
	)
	w := newWorld(t, nsWide, payments, paymentsCanary, reportOnly, clusterDefault)
	w.pod("shop", "web", "10.0.0.1", map[string]string{"app": "web"})
	w.pod("shop", "pay", "10.0.0.2", map[string]string{"app": "payments"})
	w.pod("shop", "canary", "10.0.0.3", map[string]string{"app": "payments", "track": "canary"})
	w.pod("shop", "canary-x", "10.0.0.4", map[string]string{"app": "payments", "track": "canary", "extra": "1"})
	w.pod("other", "job", "10.0.1.1", nil)
	for _, tc := range []struct {
		name, ip, dest, want, rule string
	}{
		{"namespace-wide-allow", "10.0.0.1", "git.corp.example:443", "allow", "suffix .corp.example (EgressPolicy shop/ns-wide egress[0])"},
		{"namespace-wide-default-deny", "10.0.0.1", "api.stripe.example:443", "deny", "default (EgressPolicy shop/ns-wide default)"},
		{"specific-selector-decides", "10.0.0.2", "api.stripe.example:443", "allow:critical", "host api.stripe.example (EgressPolicy shop/payments egress[0])"},
		{"specific-selector-port", "10.0.0.2", "api.stripe.example:80", "deny", "default (EgressPolicy shop/payments default)"},
		{"less-specific-allow-does-not-apply", "10.0.0.2", "git.corp.example:443", "deny", "default (EgressPolicy shop/payments default)"},
		{"less-specific-deny-wins", "10.0.0.2", "blocked.example:443", "deny", "host blocked.example (EgressPolicy shop/ns-wide egress[1])"},
		{"most-specific-of-three", "10.0.0.3", "new.stripe.example:443", "allow", "host new.stripe.example (EgressPolicy shop/payments-canary egress[0])"},
		{"cluster-default-deny-wins-everywhere", "10.0.0.3", "exfil.example:443", "deny", "host exfil.example (ClusterEgressPolicy default egress[1])"},
		{"report-only-changes-no-verdict", "10.0.0.4", "new.stripe.example:443", "would_deny", "host new.stripe.example (EgressPolicy shop/tighten egress[0])"},
		{"report-only-is-not-the-decider", "10.0.0.4", "api.stripe.example:443", "allow", "host api.stripe.example (EgressPolicy shop/payments-canary egress[0])"},
		{"unselected-pod-gets-cluster-default", "10.0.1.1", "anything.example:443", "allow:background", "default (ClusterEgressPolicy default default)"},
		{"unknown-address-gets-cluster-default", "10.9.9.9", "anything.example:443", "allow:background", "default (ClusterEgressPolicy default default)"},
		{"unknown-address-and-default-deny", "10.9.9.9", "169.254.169.254:80", "deny", "cidr 169.254.169.254/32 (ClusterEgressPolicy default egress[0])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, rule := w.decide(t, tc.ip, tc.dest)
			if got != tc.want || rule != tc.rule {
				t.Errorf("got %s by %q\nwant %s by %q", got, rule, tc.want, tc.rule)
			}
		})
	}
	t.Run("policy-change-is-a-new-snapshot", func(t *testing.T) {
		w.e.Set(parse(t, `
metadata: {name: payments, namespace: shop}
spec:
  podSelector: {matchLabels: {app: payments}}
  egress:
  - {action: deny, hosts: [api.stripe.example]}`), false)
		if got, _ := w.decide(t, "10.0.0.2", "api.stripe.example:443"); got != "deny" {
			t.Errorf("after the change: %s", got)
		}
		w.e.Delete("shop", "payments", false)
		if got, rule := w.decide(t, "10.0.0.2", "git.corp.example:443"); got != "allow" || !strings.Contains(rule, "ns-wide") {
			t.Errorf("after deleting it: %s by %s", got, rule)
		}
	})
	t.Run("invalid-policy-denies-what-it-selects", func(t *testing.T) {
		w.e.Set(parse(t, `
metadata: {name: broken, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  egress: [{action: allow, hosts: ["not a host"]}]`), false)
		if got, rule := w.decide(t, "10.0.0.1", "git.corp.example:443"); got != "deny" || !strings.Contains(rule, "shop/broken (invalid") {
			t.Errorf("invalid policy: %s by %s", got, rule)
		}
		w.e.Set(parse(t, `
metadata: {name: broken, namespace: shop}
spec:
  podSelector: {matchExpressions: [{key: app, operator: Near}]}`), false)
		if got, _ := w.decide(t, "10.0.0.2", "api.stripe.example:443"); got != "deny" {
			t.Errorf("an invalid selector must deny the whole namespace: %s", got)
		}
		if got, _ := w.decide(t, "10.0.1.1", "anything.example:443"); got != "allow:background" {
			t.Errorf("another namespace is not touched: %s", got)
		}
		w.e.Delete("shop", "broken", false)
	})
}

// TestTokensPreferredAndChecked covers identity by token without an API
// server (the real TokenReview is in the kube tests): a pod's token from
// its own or an unknown address is the pod, from another pod's address it
// is refused.
func TestTokensPreferredAndChecked(t *testing.T) {
	w := newWorld(t, `{metadata: {name: p, namespace: a}, spec: {default: allow}}`)
	w.pod("a", "one", "10.0.0.1", nil)
	w.pod("b", "two", "10.0.0.2", nil)
	if got := bearerOr("Bearer abc"); got != "abc" {
		t.Errorf("bearer = %q", got)
	}
	for _, v := range []string{"", "Basic dTpw", "Bearer", "Bearer  "} {
		if got := bearerOr(v); got != "" {
			t.Errorf("bearer(%q) = %q", v, got)
		}
	}
	tok := identity.Token{Namespace: "a", ServiceAccount: "sa", Pod: "one", PodUID: "uid-one"}
	for _, tc := range []struct{ name, ip, wantErr, wantPolicy string }{
		{"own-address", "10.0.0.1", "", "a/p"},
		{"unknown-address", "10.9.9.9", "", "a/p"},
		{"another-pods-address", "10.0.0.2", "came from the address of pod b/two", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wl, err := w.e.byToken(tok, netip.MustParseAddr(tc.ip))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil || wl.By != ByToken || wl.Rules.Policy() != tc.wantPolicy {
				t.Fatalf("%+v %v", wl, err)
			}
		})
	}
	t.Run("token-of-a-pod-not-yet-indexed-gets-the-default", func(t *testing.T) {
		wl, err := w.e.byToken(identity.Token{Namespace: "a", Pod: "new", PodUID: "uid-new"}, netip.MustParseAddr("10.9.9.9"))
		if err != nil || wl.Rules != w.e.Unknown() {
			t.Fatalf("%+v %v", wl, err)
		}
	})
	t.Run("same-name-other-uid-is-not-the-pod", func(t *testing.T) {
		wl, err := w.e.byToken(identity.Token{Namespace: "a", Pod: "one", PodUID: "old-uid"}, netip.MustParseAddr("10.9.9.9"))
		if err != nil || wl.Rules != w.e.Unknown() {
			t.Fatalf("a token of the pod's predecessor got %+v %v", wl, err)
		}
	})
}

func bearerOr(v string) string {
	tok, _ := bearer(v)
	return tok
}

// BenchmarkDecision is the cost of one decision at the scale:
// 1,000 policies in 100 namespaces and 50,000 pods, each client judged
// for a destination (identify by address, its effective policy, the
// route tables). Label sets are warm (the first request of a label set
// after a policy change computes its effective policy once).
func BenchmarkDecision(b *testing.B) {
	e, addrs := scale(b, 1000, 50000)
	dest, _ := route.ParseDest("api.partner-7.example:443", 0)
	ctx := context.Background()
	for _, a := range addrs { // warm every label set
		wl, _ := e.Identify(ctx, a, "")
		wl.Rules.Decide(ctx, dest, nil)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		wl, err := e.Identify(ctx, addrs[i%len(addrs)], "")
		if err != nil || wl.Rules == nil {
			b.Fatal("no policy")
		}
		_ = wl.Rules.Decide(ctx, dest, nil)
		i += 7919
	}
}

// scale builds an engine with np policies over 100 namespaces and npods
// pods (ten per label set), and returns the pods' addresses.
func scale(b testing.TB, np, npods int) (*Engine, []netip.Addr) {
	e := &Engine{Pods: identity.NewPods()}
	const namespaces = 100
	var ps []*EgressPolicy
	for i := range np {
		ns := fmt.Sprintf("ns-%03d", i%namespaces)
		app := fmt.Sprintf("app-%d", i/namespaces)
		p := &EgressPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p-" + app},
			Spec: Spec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
				Egress: []Rule{
					{Action: "deny", Hosts: []string{"blocked.example"}, Suffixes: []string{".evil.example"}},
					{Action: "allow", Hosts: []string{fmt.Sprintf("api.partner-%d.example", i%10)}, Ports: []int32{443}},
					{Action: "allow", Suffixes: []string{".svc.cluster.local", ".corp.example"}},
					{Action: "allow", CIDRs: []string{"203.0.113.0/24"}},
				}}}
		ps = append(ps, p)
	}
	e.Replace(ps, []*EgressPolicy{{ObjectMeta: metav1.ObjectMeta{Name: DefaultName},
		Spec: Spec{Egress: []Rule{{Action: "deny", CIDRs: []string{"169.254.169.254/32"}}}}}})
	addrs := make([]netip.Addr, npods)
	perNS := npods / namespaces
	for i := range npods {
		ns := i / perNS
		app := (i % perNS) / 10 % (np / namespaces)
		a := netip.AddrFrom4([4]byte{10, byte(16 + i>>16), byte(i >> 8), byte(i)})
		addrs[i] = a
		e.Pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%03d", ns), Name: fmt.Sprintf("pod-%d", i),
			UID: types.UID(fmt.Sprint("uid-", i)), Labels: map[string]string{"app": fmt.Sprintf("app-%d", app), "pod-template-hash": fmt.Sprint(i / 10)}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: a.String()}})
	}
	return e, addrs
}

// TestDecisionAllocs keeps the decision free of allocations once a label
// set's effective policy is known.
func TestDecisionAllocs(t *testing.T) {
	e, addrs := scale(t, 100, 1000)
	dest, _ := route.ParseDest("api.partner-3.example:443", 0)
	ctx := context.Background()
	wl, _ := e.Identify(ctx, addrs[5], "")
	wl.Rules.Decide(ctx, dest, nil)
	n := testing.AllocsPerRun(200, func() {
		wl, _ := e.Identify(ctx, addrs[5], "")
		_ = wl.Rules.Decide(ctx, dest, nil)
	})
	if n > 0 {
		t.Errorf("%v allocations per decision", n)
	}
}

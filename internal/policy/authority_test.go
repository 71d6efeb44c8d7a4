package policy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/route"
)

// The authority model (docs/policy.md, "Who may set what"): one subtest per
// row of its table, through the gateway's four listeners where the row
// applies to traffic.

func parsePolicy(t *testing.T, doc string) *policy.EgressPolicy {
	t.Helper()
	var p policy.EgressPolicy
	if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// authorityWorld is an engine with pods at 127.0.2.x, one per namespace
// given, labelled app=web, and the policies docs.
func authorityWorld(t *testing.T, namespaces []string, granted func(pool, ns string) bool, docs ...string) (*policy.Engine, map[string]string) {
	t.Helper()
	eng := &policy.Engine{Pods: identity.NewPods(), Pools: func(n string) bool { return n == "critical" }, Granted: granted}
	ips := map[string]string{}
	for i, ns := range namespaces {
		ip := fmt.Sprintf("127.0.2.%d", 10+i)
		ips[ns] = ip
		eng.Pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: types.UID("uid-" + ns), Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{ServiceAccountName: "sa"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}})
	}
	var ps, cps []*policy.EgressPolicy
	for _, d := range docs {
		p := parsePolicy(t, d)
		if p.Namespace == "" {
			cps = append(cps, p)
		} else {
			ps = append(ps, p)
		}
	}
	eng.Replace(ps, cps)
	return eng, ips
}

// poolMember is an upstream proxy that answers every forwarded request
// with "via <name>".
func poolMember(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "via %s", name) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// refusal waits for an access log line of kind whose error_detail has
// want.
func (g *gateway) refusal(t *testing.T, kind, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, s := range strings.Split(g.log.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(s), &m) == nil && m["kind"] == kind && strings.Contains(fmt.Sprint(m["error_detail"]), want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: no refusal naming %q in:\n%s", kind, want, g.log.String())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAuthority(t *testing.T) {
	port := origin(t)
	names := hosts{"allowed.test": "127.0.0.1", "blocked.test": "127.0.0.1", "routes-deny.test": "127.0.0.1"}
	allowed, blocked := "allowed.test:"+port, "blocked.test:"+port

	// Row: the cluster default's deny rules hold for every client; no
	// EgressPolicy's allow opens them.
	t.Run("default-denies", func(t *testing.T) {
		eng, ips := authorityWorld(t, listenerKinds, nil, `
metadata: {name: default}
spec:
  default: allow
  egress: [{action: deny, hosts: [blocked.test]}]`)
		for _, kind := range listenerKinds {
			eng.Set(parsePolicy(t, `
metadata: {name: open, namespace: `+kind+`}
spec:
  egress: [{action: allow, hosts: ["*"]}]`), false)
		}
		g := startGateway(t, eng, names, nil)
		for _, kind := range listenerKinds {
			if body, _ := g.request(t, kind, ips[kind], allowed, ""); !strings.Contains(body, "hello from allowed.test") {
				t.Errorf("%s: allowed.test: %q", kind, body)
			}
			if body, _ := g.request(t, kind, ips[kind], blocked, ""); body != "" {
				t.Errorf("%s: the tenant's allow opened the cluster default's deny: %q", kind, body)
			}
		}
	})

	// Row: the cluster default's limits are a ceiling over each namespace;
	// an EgressPolicy with a higher limit does not lift them.
	t.Run("default-limits", func(t *testing.T) {
		eng, ips := authorityWorld(t, listenerKinds, nil, `
metadata: {name: default}
spec:
  default: allow
  limits: {requests: 2, unit: hour}`)
		for _, kind := range listenerKinds {
			eng.Set(parsePolicy(t, `
metadata: {name: lifted, namespace: `+kind+`}
spec:
  egress: [{action: allow, hosts: ["*"]}]
  limits: {requests: 1000, unit: second}`), false)
		}
		g := startGateway(t, eng, names, nil)
		for _, kind := range listenerKinds {
			for i := range 2 {
				if body, _ := g.request(t, kind, ips[kind], allowed, ""); !strings.Contains(body, "hello from") {
					t.Fatalf("%s: request %d within the default's limit: %q", kind, i+1, body)
				}
			}
			if body, st := g.request(t, kind, ips[kind], allowed, ""); body != "" {
				t.Errorf("%s: the tenant's limit lifted the cluster default's (request 3 of 2/hour passed, status %d)", kind, st)
				continue
			}
			g.refusal(t, kind, "ClusterEgressPolicy/default in "+kind+" is limited to 2/h")
		}
	})

	// Row: a tenant's own limits narrow within the ceiling.
	t.Run("tenant-limits", func(t *testing.T) {
		eng, ips := authorityWorld(t, listenerKinds, nil, `
metadata: {name: default}
spec:
  default: allow
  limits: {requests: 100, unit: hour}`)
		for _, kind := range listenerKinds {
			eng.Set(parsePolicy(t, `
metadata: {name: narrow, namespace: `+kind+`}
spec:
  egress: [{action: allow, hosts: ["*"]}]
  limits: {requests: 1, unit: hour}`), false)
		}
		g := startGateway(t, eng, names, nil)
		for _, kind := range listenerKinds {
			if body, _ := g.request(t, kind, ips[kind], allowed, ""); !strings.Contains(body, "hello from") {
				t.Fatalf("%s: first request: %q", kind, body)
			}
			if body, _ := g.request(t, kind, ips[kind], allowed, ""); body != "" {
				t.Errorf("%s: the tenant's own limit did not hold: %q", kind, body)
				continue
			}
			g.refusal(t, kind, kind+"/narrow is limited to 1/h")
		}
	})

	// Row: pools are granted to namespaces by the gateway's operator
	// (pools.<name>.namespaces); an EgressPolicy naming a pool its
	// namespace was not granted is not accepted and denies everything; a
	// grant given by a reload takes effect on Recheck.
	t.Run("pool-grants", func(t *testing.T) {
		grants := config.Pool{Namespaces: []string{"granted"}}
		eng, ips := authorityWorld(t, append([]string{"granted"}, listenerKinds...), func(pool, ns string) bool {
			return pool == "critical" && grants.Grants(ns)
		}, `
metadata: {name: default}
spec:
  default: allow
  pool: critical`)
		for _, ns := range append([]string{"granted"}, listenerKinds...) {
			c := eng.Set(parsePolicy(t, `
metadata: {name: critical, namespace: `+ns+`}
spec:
  egress: [{action: allow, hosts: [allowed.test], pool: critical}]`), false)
			switch {
			case ns == "granted" && c.Err != nil:
				t.Fatalf("granted namespace: %v", c.Err)
			case ns != "granted" && (c.Reason != policy.ReasonPoolNotGranted || !strings.Contains(policy.Condition(c).Message, `pool "critical" is not granted to namespace "`+ns+`"`)):
				t.Errorf("%s: named an ungranted pool: reason %s, %q", ns, c.Reason, policy.Condition(c).Message)
			}
		}
		g := startGateway(t, eng, names, map[string]string{"critical": poolMember(t, "critical")})
		if body, _ := g.request(t, "http", ips["granted"], allowed, ""); body != "via critical" {
			t.Errorf("granted namespace: %q, want via critical", body)
		}
		for _, kind := range listenerKinds {
			if body, _ := g.request(t, kind, ips[kind], allowed, ""); body != "" {
				t.Errorf("%s: a policy naming an ungranted pool let traffic through: %q", kind, body)
			}
		}
		// The operator grants the pool to "http" too (a reload).
		grants.Namespaces = append(grants.Namespaces, "http")
		eng.Recheck()
		if body, _ := g.request(t, "http", ips["http"], allowed, ""); body != "via critical" {
			t.Errorf("after the grant: %q, want via critical", body)
		}
	})

	// Row: the gateway's own deny routes hold under every policy.
	t.Run("gateway-routes", func(t *testing.T) {
		eng, ips := authorityWorld(t, listenerKinds, nil, `
metadata: {name: default}
spec:
  default: allow`)
		for _, kind := range listenerKinds {
			eng.Set(parsePolicy(t, `
metadata: {name: open, namespace: `+kind+`}
spec:
  egress: [{action: allow, hosts: ["*"]}]`), false)
		}
		tbl, err := route.New([]route.Rule{{Match: route.Match{Hosts: []string{"routes-deny.test"}}, Action: route.Deny, Source: "gateway deny"}}, route.Direct, "")
		if err != nil {
			t.Fatal(err)
		}
		g := startGatewayRoutes(t, eng, names, nil, tbl)
		for _, kind := range listenerKinds {
			if body, _ := g.request(t, kind, ips[kind], "routes-deny.test:"+port, ""); body != "" {
				t.Errorf("%s: a tenant's allow opened the gateway's deny route: %q", kind, body)
			}
			if body, _ := g.request(t, kind, ips[kind], allowed, ""); !strings.Contains(body, "hello from") {
				t.Errorf("%s: allowed.test: %q", kind, body)
			}
		}
	})

	// Row: a namespace's policies select only its own pods, whatever their
	// labels.
	t.Run("namespace-bound", func(t *testing.T) {
		eng, ips := authorityWorld(t, []string{"team-a", "team-b"}, nil, `
metadata: {name: default}
spec:
  egress: [{action: allow, hosts: [allowed.test]}]`, `
metadata: {name: grab, namespace: team-a}
spec:
  podSelector: {matchLabels: {app: web}}
  egress: [{action: allow, hosts: ["*"]}]`)
		g := startGateway(t, eng, names, nil)
		for _, kind := range listenerKinds {
			if body, _ := g.request(t, kind, ips["team-a"], blocked, ""); !strings.Contains(body, "hello from") {
				t.Errorf("%s: team-a's own policy: %q", kind, body)
			}
			if body, _ := g.request(t, kind, ips["team-b"], blocked, ""); body != "" {
				t.Errorf("%s: team-a's policy applied to team-b's pod: %q", kind, body)
			}
		}
	})
}

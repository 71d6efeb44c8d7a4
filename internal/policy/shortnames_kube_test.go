package policy_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/proxyd"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/upstream"
)

// shortGateway is c.gateway with EGRET_SHORT_NAMES=route: the pod index
// and the policies from the API server, short names expanded for the
// calling pod's namespace.
func (c *cluster) shortGateway(t *testing.T, names hosts) *gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pods := identity.NewPods()
	go identity.Watch(ctx, c.Clientset, pods)
	eng := &policy.Engine{Pods: pods}
	if err := (&policy.Watcher{Client: c.dyn, Engine: eng}).Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := identity.WaitSynced(ctx, pods); err != nil {
		t.Fatal(err)
	}
	tbl, err := route.New(nil, route.Direct, "")
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{log: &testutil.SyncBuffer{}, eng: eng}
	s, err := proxy.New(proxy.Options{Via: "gw-test", Resolver: names, AccessLog: g.log, Workloads: proxyd.Workloads(eng),
		ShortNames: proxy.ShortNames{On: true, Route: true}},
		&proxy.State{Routes: tbl, Pools: map[string]*upstream.Pool{}, DefaultPool: "default"})
	if err != nil {
		t.Fatal(err)
	}
	g.s = s
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.http, g.socks = hl.Addr().String(), sl.Addr().String()
	go s.Serve(hl)
	go s.ServeSOCKS(sl, proxy.SOCKSOptions{})
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		s.Shutdown(sctx)
	})
	return g
}

// TestShortNamesAgainstAPIServer: a pod of one namespace calls a Service
// by its short name and another namespace's by "name.namespace" through
// the gateway, which knows the pod (and the namespaces) from the API
// server: on the explicit listener, CONNECT and SOCKS5 alike, "payments"
// becomes payments.<its namespace>.svc.cluster.local, which its
// EgressPolicy allows, and "ledger.<other>" becomes
// ledger.<other>.svc.cluster.local, which it does not — the policy judges
// the expanded name. A client that is no pod gets the 502 that names the
// fix: its namespace is unknown.
func TestShortNamesAgainstAPIServer(t *testing.T) {
	c := requireCluster(t)
	port := origin(t)
	shop := c.Namespace(t, "short-shop", nil)
	billing := c.Namespace(t, "short-billing", nil)
	fqdn := func(name, ns string) string { return name + "." + ns + ".svc.cluster.local" }
	names := hosts{fqdn("payments", shop): "127.0.0.1", fqdn("ledger", billing): "127.0.0.1",
		"payments": "127.0.0.1"} // the gateway's own answer for the bare name: never asked
	g := c.shortGateway(t, names)
	c.apply(t, fmt.Sprintf(`
metadata: {name: payments-only, namespace: %s}
spec:
  podSelector: {matchLabels: {app: web}}
  egress:
  - {name: payments, action: allow, hosts: [%s]}`, shop, fqdn("payments", shop)))
	_, webIP := c.pod(t, shop, "web", "", map[string]string{"app": "web"})
	c.pod(t, billing, "ledger-0", "", nil)
	at := func(h string) string { return h + ":" + port }
	eventually(t, 10*time.Second, "the pod and its policy are known", func() bool {
		_, st := g.request(t, "http", webIP, at("ledger."+billing), "")
		return st == 403
	})
	for _, kind := range []string{"http", "connect", "socks5"} {
		t.Run(kind, func(t *testing.T) {
			off := len(g.log.String())
			body, st := g.request(t, kind, webIP, at("payments"), "")
			if st != 200 || body != "hello from payments" {
				t.Fatalf("payments: %d %q", st, body)
			}
			l := g.line(t, off, kind, fqdn("payments", shop))
			if l["dest"] != at(fqdn("payments", shop)) || l["short_name"] != "payments" || l["namespace"] != shop || l["policy_rule"] == nil {
				t.Errorf("log line %v", l)
			}
			if _, st := g.request(t, kind, webIP, at("ledger."+billing), ""); st != 403 {
				t.Errorf("ledger.%s: %d, want 403 (the policy allows only %s)", billing, st, fqdn("payments", shop))
			}
		})
	}
	t.Run("unknown-client", func(t *testing.T) {
		if !strings.HasPrefix(webIP, "127.0.") {
			t.Skip()
		}
		_, st := g.request(t, "http", "127.0.0.1", at("payments"), "")
		if st != 502 {
			t.Errorf("a client that is no pod: %d, want 502", st)
		}
		// The access-log line is written after the answer: wait for it.
		eventually(t, 5*time.Second, "the refusal naming the unknown namespace is logged", func() bool {
			return strings.Contains(g.log.String(), "does not know the calling pod's namespace")
		})
	})
}

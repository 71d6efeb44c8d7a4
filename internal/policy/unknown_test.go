package policy_test

import (
	"strings"
	"testing"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/policy"
)

// TestUnknownClientsPerAddress: the cluster default's limits hold per
// address for clients the gateway cannot identify, on every listener: one
// such client using up its slots leaves the others theirs (they shared
// one bucket before).
func TestUnknownClientsPerAddress(t *testing.T) {
	port := origin(t)
	eng := &policy.Engine{Pods: identity.NewPods()}
	eng.Set(parsePolicy(t, `
metadata: {name: default}
spec:
  default: allow
  limits: {requests: 1, unit: hour}`), true)
	g := startGateway(t, eng, hosts{"allowed.test": "127.0.0.1"}, nil)
	dest := "allowed.test:" + port
	for i, kind := range listenerKinds {
		greedy, other := "127.0.4."+string(rune('1'+i)), "127.0.5."+string(rune('1'+i))
		if body, _ := g.request(t, kind, greedy, dest, ""); !strings.Contains(body, "hello from") {
			t.Fatalf("%s: first request: %q", kind, body)
		}
		if body, _ := g.request(t, kind, greedy, dest, ""); body != "" {
			t.Errorf("%s: the greedy client's second request passed its limit", kind)
		}
		if body, _ := g.request(t, kind, other, dest, ""); !strings.Contains(body, "hello from") {
			t.Errorf("%s: another unidentified client was refused: the greedy one used up its slot", kind)
		}
	}
}

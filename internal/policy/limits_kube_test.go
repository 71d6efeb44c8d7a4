package policy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/policy"
)

// TestLimitsAgainstAPIServer: the CRD's schema refuses a rule beyond the
// per-rule limit at the API server, and the gateway refuses the policies
// beyond the per-namespace limit with a status condition that names it,
// keeping the oldest.
func TestLimitsAgainstAPIServer(t *testing.T) {
	c := requireCluster(t)
	ns := c.Namespace(t, "limits", nil)
	hs := make([]string, policy.MaxEntries+1)
	for i := range hs {
		hs[i] = fmt.Sprintf("h%d.example", i)
	}
	p := parsePolicy(t, `{metadata: {name: huge, namespace: `+ns+`}, spec: {egress: [{action: allow, hosts: [`+strings.Join(hs, ", ")+`]}]}}`)
	u, err := policy.ToUnstructured(p, false)
	if err != nil {
		t.Fatal(err)
	}
	delete(u.Object, "status")
	if _, err := c.res(ns, false).Create(context.Background(), u, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "must have at most 1024 items") {
		t.Errorf("1,025 hosts in a rule: %v", err)
	}

	for i := range 3 {
		c.apply(t, fmt.Sprintf(`{metadata: {name: p%d, namespace: %s}, spec: {egress: [{action: allow, hosts: [a.example]}]}}`, i, ns))
		time.Sleep(1100 * time.Millisecond) // creation times a second apart: p0 is the oldest
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	eng := &policy.Engine{Pods: identity.NewPods(), MaxPerNamespace: 2}
	w := &policy.Watcher{Client: c.dyn, Engine: eng}
	if err := w.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{policy.ReasonValid, policy.ReasonValid, policy.ReasonLimitExceeded} {
		cond := c.condition(t, ns, fmt.Sprintf("p%d", i))
		if cond.Reason != want {
			t.Errorf("p%d: %s %q, want %s", i, cond.Reason, cond.Message, want)
		}
		if want == policy.ReasonLimitExceeded && !strings.Contains(cond.Message, "has more than 2 EgressPolicies, the gateway's limit") {
			t.Errorf("p%d: the message does not name the limit: %q", i, cond.Message)
		}
	}
	// Deleting the oldest admits the third; its status says so.
	c.remove(t, ns, "p0")
	eventually(t, 10*time.Second, "p2 admitted", func() bool { return c.condition(t, ns, "p2").Reason == policy.ReasonValid })
}

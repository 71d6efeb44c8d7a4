package policy_test

import (
	"context"
	"net/netip"
	"testing"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/policy"
)

// grantAll is an Interception that grants every Secret and reads none.
type grantAll struct{}

func (grantAll) Granted(string, string) bool { return true }
func (grantAll) Credential(spec intercept.CredentialSpec, _, _ string, _ []string) (*intercept.Credential, error) {
	return intercept.NewCredential(spec, "")
}

// TestInterceptSitePrecedence: the cluster default's sites come before the
// deciding EgressPolicy's (a tenant cannot replace the credential or the
// rules the cluster admin set for a host); another selecting policy's
// sites and a report-only policy's do not apply; without an interception
// CA a policy that intercepts is invalid and denies everything.
func TestInterceptSitePrecedence(t *testing.T) {
	docs := []string{`
metadata: {name: default}
spec:
  default: allow
  intercept:
  - hosts: [admin.test]
    credentials: [{secret: egret-system/admin}]`, `
metadata: {name: a-web, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  default: allow
  intercept:
  - hosts: [admin.test, "*.tenant.test"]
    credentials: [{secret: tenant}]`, `
metadata: {name: b-any, namespace: shop}
spec:
  default: allow
  intercept:
  - hosts: [other.test]`, `
metadata: {name: trial, namespace: batch}
spec:
  mode: report
  intercept:
  - hosts: [trial.test]`}
	eng, ips := authorityWorld(t, []string{"shop", "batch"}, nil, docs...)
	eng.Intercept = grantAll{}
	eng.Recheck()
	for _, c := range eng.Policies() {
		if c.Err != nil {
			t.Fatalf("%s: %v", c.Key, c.Err)
		}
	}
	site := func(ns, host string) *intercept.Site {
		w, err := eng.Identify(context.Background(), netip.MustParseAddr(ips[ns]), "")
		if err != nil {
			t.Fatal(err)
		}
		return w.Rules.InterceptSite(host)
	}
	if s := site("shop", "admin.test"); s == nil || len(s.Credentials) != 1 || s.Credentials[0].Name != "egret-system/admin" {
		t.Errorf("admin.test for shop: %+v, want the cluster default's site", s)
	}
	if s := site("shop", "x.tenant.test"); s == nil || s.Credentials[0].Name != "shop/tenant" {
		t.Errorf("x.tenant.test for shop: %+v, want the deciding policy's site with shop/tenant", s)
	}
	if s := site("shop", "other.test"); s != nil {
		t.Errorf("other.test for shop: %+v, want none (b-any does not decide)", s)
	}
	if s := site("batch", "trial.test"); s != nil {
		t.Errorf("trial.test for batch: %+v, want none (report-only)", s)
	}
	if s := site("batch", "admin.test"); s == nil {
		t.Error("admin.test for batch: want the cluster default's site")
	}

	eng.Intercept = nil
	eng.Recheck()
	for _, c := range eng.Policies() {
		if c.Key == "batch/trial" || c.Key == "shop/a-web" {
			if c.Reason != policy.ReasonInterceptUnavailable {
				t.Errorf("%s without an interception CA: %s %v, want %s", c.Key, c.Reason, c.Err, policy.ReasonInterceptUnavailable)
			}
		}
	}
}

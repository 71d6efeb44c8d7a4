package policy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"egret.io/egret/internal/cli"
	"egret.io/egret/internal/policy"
)

// TestExplainCommand runs `egret policy explain` against the real API
// server: the verdict, the deciding policy and rule, and the pool, for a
// pod two policies select, with the cluster default's deny winning.
func TestExplainCommand(t *testing.T) {
	c := requireCluster(t)
	ns := c.Namespace(t, "explain", nil)
	c.apply(t, fmt.Sprintf(`
metadata: {name: web, namespace: %s}
spec:
  podSelector: {matchLabels: {app: web}}
  pool: background
  egress:
  - {name: payments, action: allow, hosts: [api.payments.example], ports: [443], pool: critical}
  - {action: allow, suffixes: [.example.com]}`, ns))
	c.apply(t, fmt.Sprintf(`
metadata: {name: everyone, namespace: %s}
spec:
  default: allow`, ns))
	c.apply(t, `
metadata: {name: default}
spec:
  egress:
  - {name: no-metadata, action: deny, cidrs: [169.254.169.254/32]}`)
	t.Cleanup(func() { c.remove(t, "", "default") })
	c.pod(t, ns, "web-1", "shop", map[string]string{"app": "web"})

	explain := func(t *testing.T, args ...string) (string, string, int) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := cli.Main(append([]string{"policy", "explain", "--kubeconfig", c.Kubeconfig}, args...), nil, &out, &errOut)
		return out.String(), errOut.String(), code
	}
	for _, tc := range []struct {
		to   string
		want []string
	}{
		{"api.payments.example:443", []string{"verdict:   allow", "policy:    " + ns + "/web", "applies:   " + ns + "/web, " + ns + "/everyone",
			"rule:      host api.payments.example (EgressPolicy " + ns + "/web rule payments)", "pool:      critical", "service account shop"}},
		{"www.example.com:80", []string{"verdict:   allow", "pool:      background"}},
		{"elsewhere.test:80", []string{"verdict:   deny", "policy:    " + ns + "/web", "pool:      none (refused)"}},
		{"169.254.169.254:80", []string{"verdict:   deny", "rule:      cidr 169.254.169.254/32 (ClusterEgressPolicy default rule no-metadata)", "pool:      none (refused)"}},
	} {
		t.Run(tc.to, func(t *testing.T) {
			out, errOut, code := explain(t, "--from", ns+"/web-1", "--to", tc.to)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		out, errOut, code := explain(t, "--from", ns+"/web-1", "--to", "api.payments.example:443", "-o", "json")
		var ex policy.Explanation
		if code != 0 || json.Unmarshal([]byte(out), &ex) != nil {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		if ex.Verdict != policy.VerdictAllow || ex.Pool != "critical" || ex.Policy != ns+"/web" {
			t.Errorf("%+v", ex)
		}
	})

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad-from", []string{"--from", "web-1", "--to", "a.example:443"}, 2, "want NAMESPACE/POD"},
		{"bad-to", []string{"--from", ns + "/web-1", "--to", "a.example"}, 2, "--to"},
		{"no-pod", []string{"--from", ns + "/nobody", "--to", "a.example:443"}, 1, "pod " + ns + "/nobody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := explain(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
				t.Errorf("exit %d, stderr %q; want exit %d and a short error naming %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}

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

// TestExplainInterceptCommand: `egret policy explain --method --path`
// against the real API server, for a destination the pod's policy
// intercepts: the site, its credential by name (never a value: explain
// reads no Secret), and the method/path verdict in enforce and report
// mode, an encoded path judged by every reading; a destination not
// intercepted says so.
func TestExplainInterceptCommand(t *testing.T) {
	c := requireCluster(t)
	ns := c.Namespace(t, "explain-icpt", nil)
	c.apply(t, fmt.Sprintf(`
metadata: {name: agent, namespace: %s}
spec:
  podSelector: {matchLabels: {app: agent}}
  egress:
  - {action: allow, hosts: [api.openai.example, plain.example]}
  intercept:
  - hosts: [api.openai.example]
    exempt: [pinned.openai.example]
    credentials: [{secret: openai}]
    http:
      rules:
      - {action: deny, methods: [DELETE]}
      - {action: deny, pathPrefixes: [/v1/admin]}
      - {action: allow, pathPrefixes: [/v1]}`, ns))
	c.apply(t, fmt.Sprintf(`
metadata: {name: trial, namespace: %s}
spec:
  podSelector: {matchLabels: {app: trial}}
  egress:
  - {action: allow, hosts: [api.openai.example]}
  intercept:
  - hosts: [api.openai.example]
    http: {mode: report, rules: [{action: deny, methods: [DELETE]}]}`, ns))
	c.pod(t, ns, "agent-1", "", map[string]string{"app": "agent"})
	c.pod(t, ns, "trial-1", "", map[string]string{"app": "trial"})
	explain := func(t *testing.T, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := cli.Main(append([]string{"policy", "explain", "--kubeconfig", c.Kubeconfig}, args...), nil, &out, &errOut); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		return out.String()
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"site", []string{"--from", ns + "/agent-1", "--to", "api.openai.example:443"},
			[]string{"intercept: site api.openai.example, mode enforce", "credential: Authorization from Secret " + ns + "/openai", "exempt:    pinned.openai.example"}},
		{"allowed", []string{"--from", ns + "/agent-1", "--to", "api.openai.example:443", "--path", "/v1/models?limit=5"},
			[]string{"request:   GET /v1/models", "http:      allow (rule 3)"}},
		{"method-denied", []string{"--from", ns + "/agent-1", "--to", "api.openai.example:443", "--method", "delete", "--path", "/v1/files/f-1"},
			[]string{"request:   DELETE /v1/files/f-1", "http:      deny (rule 1)"}},
		{"encoded-path-denied", []string{"--from", ns + "/agent-1", "--to", "api.openai.example:443", "--path", "/v1/x/..%2Fadmin/users"},
			[]string{"http:      deny (rule 2, the path read as /v1/admin/users)"}},
		{"case-denied", []string{"--from", ns + "/agent-1", "--to", "api.openai.example:443", "--path", "/v1/Admin/users"},
			[]string{"http:      deny (rule 2, in any letter case)"}},
		{"no-rule", []string{"--from", ns + "/agent-1", "--to", "api.openai.example:443", "--path", "/v2"},
			[]string{"http:      deny (default)"}},
		{"report", []string{"--from", ns + "/trial-1", "--to", "api.openai.example:443", "--method", "DELETE", "--path", "/x"},
			[]string{"mode report", "http:      allow (would_deny) (rule 1)"}},
		{"not-intercepted", []string{"--from", ns + "/agent-1", "--to", "plain.example:443", "--path", "/"},
			[]string{"intercept: no (an opaque tunnel"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := explain(t, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		var ex policy.Explanation
		out := explain(t, "--from", ns+"/agent-1", "--to", "api.openai.example:443", "--method", "DELETE", "--path", "/v1/x", "-o", "json")
		if err := json.Unmarshal([]byte(out), &ex); err != nil || ex.Intercept == nil || !ex.Intercept.Intercepted ||
			ex.Intercept.Verdict != policy.VerdictDeny || ex.Intercept.Rule != "rule 1" {
			t.Errorf("%v %s", err, out)
		}
	})
}

package deploy

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
)

// wrongPolicies are mistakes the API server must refuse at kubectl apply,
// each with what the error must say: the field's path and the fix.
var wrongPolicies = []struct {
	name    string
	cluster bool
	doc     string // the object without apiVersion and kind
	want    []string
}{
	{name: "unknown-action", doc: `spec: {egress: [{action: alow, hosts: [a.example]}]}`,
		want: []string{`spec.egress[0].action`, `Unsupported value: "alow"`, `"allow", "deny"`}},
	{name: "missing-action", doc: `spec: {egress: [{hosts: [a.example]}]}`,
		want: []string{`spec.egress[0].action`, `Required value`}},
	{name: "misspelt-field", doc: `spec: {egress: [{acton: allow, action: allow, hosts: [a.example]}]}`,
		want: []string{`unknown field "spec.egress[0].acton"`}},
	{name: "empty-rule", doc: `spec: {egress: [{action: allow}]}`,
		want: []string{`spec.egress[0]`, `the rule matches nothing`}},
	{name: "empty-lists-rule", doc: `spec: {egress: [{action: deny, hosts: [], cidrs: []}]}`,
		want: []string{`spec.egress[0]`, `the rule matches nothing`}},
	{name: "deny-with-pool", doc: `spec: {egress: [{action: deny, hosts: [a.example], pool: fast}]}`,
		want: []string{`spec.egress[0].pool`, `a deny rule has no pool`}},
	{name: "unknown-mode", doc: `spec: {mode: dry-run}`,
		want: []string{`spec.mode`, `Unsupported value: "dry-run"`}},
	{name: "unknown-default", doc: `spec: {default: permit}`,
		want: []string{`spec.default`, `Unsupported value: "permit"`}},
	{name: "unknown-sni-mode", doc: `spec: {sni: strict}`,
		want: []string{`spec.sni`, `Unsupported value: "strict"`}},
	{name: "unknown-unit", doc: `spec: {limits: {requests: 5, unit: fortnight}}`,
		want: []string{`spec.limits.unit`, `Unsupported value: "fortnight"`, `"second", "minute", "hour"`}},
	{name: "negative-requests", doc: `spec: {limits: {requests: -1}}`,
		want: []string{`spec.limits.requests`, `greater than or equal to 0`}},
	{name: "cidr-prefix-too-long", doc: `spec: {egress: [{action: allow, cidrs: [10.0.0.0/33]}]}`,
		want: []string{`spec.egress[0].cidrs[0]`, `a cidr is an address range`}},
	{name: "cidr-is-a-name", doc: `spec: {egress: [{action: allow, cidrs: [10.0.0.0/8, example.com]}]}`,
		want: []string{`spec.egress[0].cidrs[1]`, `a cidr is an address range`}},
	{name: "cidr-with-zone", doc: `spec: {egress: [{action: allow, cidrs: ["fe80::1%eth0"]}]}`,
		want: []string{`spec.egress[0].cidrs[0]`, `a cidr is an address range`}},
	{name: "port-zero", doc: `spec: {egress: [{action: allow, ports: [0]}]}`,
		want: []string{`spec.egress[0].ports[0]`, `greater than or equal to 1`}},
	{name: "port-out-of-range", doc: `spec: {egress: [{action: allow, ports: [443, 70000]}]}`,
		want: []string{`spec.egress[0].ports[1]`, `less than or equal to 65535`}},
	{name: "host-is-a-url", doc: `spec: {egress: [{action: allow, hosts: ["https://api.example.com"]}]}`,
		want: []string{`spec.egress[0].hosts[0]`, `should match`}},
	{name: "host-with-port", doc: `spec: {egress: [{action: allow, hosts: ["api.example.com:443"]}]}`,
		want: []string{`spec.egress[0].hosts[0]`, `should match`}},
	{name: "host-bad-ipv6", doc: `spec: {egress: [{action: allow, hosts: ["2001:db8::1::2", "1:2:3", "fe80::1%eth0"]}]}`,
		want: []string{`spec.egress[0].hosts[0]`, `spec.egress[0].hosts[1]`, `spec.egress[0].hosts[2]`, `should match`}},
	{name: "host-dot", doc: `spec: {egress: [{action: allow, hosts: ["."]}]}`,
		want: []string{`spec.egress[0].hosts[0]`, `should match`}},
	{name: "host-wildcard-name", doc: `spec: {egress: [{action: allow, hosts: ["*.example.com"]}]}`,
		want: []string{`spec.egress[0].hosts[0]`, `should match`}},
	{name: "host-empty", doc: `spec: {egress: [{action: allow, hosts: [""]}]}`,
		want: []string{`spec.egress[0].hosts[0]`, `should match`}},
	{name: "suffix-empty-label", doc: `spec: {egress: [{action: allow, suffixes: [..example.com]}]}`,
		want: []string{`spec.egress[0].suffixes[0]`, `should match`}},
	{name: "suffix-star", doc: `spec: {egress: [{action: allow, suffixes: ["*"]}]}`,
		want: []string{`spec.egress[0].suffixes[0]`, `should match`}},
	{name: "selector-unknown-operator", doc: `spec: {podSelector: {matchExpressions: [{key: app, operator: Equals, values: [web]}]}}`,
		want: []string{`spec.podSelector.matchExpressions[0].operator`, `Unsupported value: "Equals"`}},
	{name: "selector-in-without-values", doc: `spec: {podSelector: {matchExpressions: [{key: app, operator: In}]}}`,
		want: []string{`spec.podSelector.matchExpressions[0].values`, `In and NotIn take values`}},
	{name: "selector-exists-with-values", doc: `spec: {podSelector: {matchExpressions: [{key: app, operator: Exists, values: [web]}]}}`,
		want: []string{`spec.podSelector.matchExpressions[0].values`, `Exists and DoesNotExist none`}},
	{name: "selector-bad-key", doc: `spec: {podSelector: {matchLabels: {"app name": web}}}`,
		want: []string{`spec.podSelector.matchLabels`, `a label key is a name`}},
	{name: "selector-bad-value", doc: `spec: {podSelector: {matchLabels: {app: "web server"}}}`,
		want: []string{`spec.podSelector.matchLabels.app`, `should match`}},
	{name: "no-spec", doc: `{}`,
		want: []string{`spec`, `Required value`}},
	{name: "cluster-with-pod-selector", cluster: true, doc: `spec: {podSelector: {matchLabels: {app: web}}}`,
		want: []string{`spec.podSelector`, `a ClusterEgressPolicy selects no pods`}},
	{name: "cluster-with-empty-pod-selector", cluster: true, doc: `spec: {podSelector: {}}`,
		want: []string{`spec.podSelector`, `a ClusterEgressPolicy selects no pods`}},
	{name: "cluster-not-default", cluster: true, doc: `metadata: {name: strict}
spec: {}`,
		want: []string{`metadata.name: only the ClusterEgressPolicy named default is used`}},
	{name: "cluster-unknown-action", cluster: true, doc: `spec: {egress: [{action: Deny, hosts: [a.example]}]}`,
		want: []string{`spec.egress[0].action`, `Unsupported value: "Deny"`}},
	{name: "intercept-no-hosts", doc: `spec: {intercept: [{exempt: [a.example]}]}`,
		want: []string{`spec.intercept[0].hosts`, `Required value`}},
	{name: "intercept-host-is-a-url", doc: `spec: {intercept: [{hosts: ["https://api.example.com"]}]}`,
		want: []string{`spec.intercept[0].hosts[0]`, `should match`}},
	{name: "intercept-secret-of-another-namespace", doc: `spec: {intercept: [{hosts: [api.example.com], credentials: [{secret: other/openai}]}]}`,
		want: []string{`spec.intercept[0].credentials[0].secret`, `should match`}},
	{name: "intercept-cluster-secret-without-namespace", cluster: true, doc: `spec: {intercept: [{hosts: [api.example.com], credentials: [{secret: openai}]}]}`,
		want: []string{`spec.intercept[0].credentials[0].secret`, `should match`}},
	{name: "intercept-unknown-scheme", doc: `spec: {intercept: [{hosts: [api.example.com], credentials: [{secret: openai, scheme: digest}]}]}`,
		want: []string{`spec.intercept[0].credentials[0].scheme`, `Unsupported value: "digest"`}},
	{name: "intercept-raw-without-header", doc: `spec: {intercept: [{hosts: [api.example.com], credentials: [{secret: openai, scheme: raw}]}]}`,
		want: []string{`spec.intercept[0].credentials[0].header`, `a raw credential needs a header name`}},
	{name: "intercept-reserved-header", doc: `spec: {intercept: [{hosts: [api.example.com], credentials: [{secret: openai, header: Proxy-Authorization}]}]}`,
		want: []string{`spec.intercept[0].credentials[0].header`, `does not set a header that decides how a request is framed or routed`}},
	{name: "intercept-basic-one-key", doc: `spec: {intercept: [{hosts: [api.example.com], credentials: [{secret: openai, scheme: basic, keys: [user]}]}]}`,
		want: []string{`spec.intercept[0].credentials[0].keys`, `for basic two`}},
	{name: "intercept-unknown-http-mode", doc: `spec: {intercept: [{hosts: [api.example.com], http: {mode: audit}}]}`,
		want: []string{`spec.intercept[0].http.mode`, `Unsupported value: "audit"`}},
	{name: "intercept-rule-without-action", doc: `spec: {intercept: [{hosts: [api.example.com], http: {rules: [{methods: [GET]}]}}]}`,
		want: []string{`spec.intercept[0].http.rules[0].action`, `Required value`}},
	{name: "intercept-path-with-query", doc: `spec: {intercept: [{hosts: [api.example.com], http: {rules: [{action: deny, paths: ["/v1/x?y=1"]}]}}]}`,
		want: []string{`spec.intercept[0].http.rules[0].paths[0]`, `should match`}},
	{name: "intercept-relative-prefix", doc: `spec: {intercept: [{hosts: [api.example.com], http: {rules: [{action: deny, pathPrefixes: [v1]}]}}]}`,
		want: []string{`spec.intercept[0].http.rules[0].pathPrefixes[0]`, `should match`}},
}

// rightPolicies must still be accepted, by the API server and by the
// gateway's compiler; the examples of docs/ and deploy/ join them.
var rightPolicies = []struct {
	name    string
	cluster bool
	doc     string
}{
	{name: "empty-spec", doc: `spec: {}`},
	{name: "cluster-empty-spec", cluster: true, doc: `spec: {}`},
	{name: "every-field", doc: `
spec:
  podSelector:
    matchLabels: {app: web, app.kubernetes.io/name: shop, tier: ""}
    matchExpressions:
    - {key: track, operator: In, values: [stable, canary]}
    - {key: example.com/legacy, operator: DoesNotExist}
    - {key: team, operator: NotIn, values: [x]}
    - {key: env, operator: Exists}
  mode: report
  default: allow
  pool: background
  sni: enforce
  limits: {requests: 50, unit: minute, maxConcurrent: 20}
  egress:
  - {name: payments, action: allow, hosts: [api.stripe.com], ports: [443], pool: critical}
  - {action: deny, suffixes: [.s3.amazonaws.com], cidrs: [169.254.169.254/32]}`},
	{name: "enums", doc: `spec: {mode: enforce, default: deny, sni: "off", limits: {unit: hour}}`},
	{name: "sni-report-unit-second", doc: `spec: {sni: report, limits: {requests: 0, unit: second, maxConcurrent: 0}}`},
	{name: "empty-selector", doc: `spec: {podSelector: {}}`},
	{name: "hosts", doc: `spec: {egress: [{action: allow, hosts: ["*", api.example.com, api.example.com., API.Example.COM, _sip._tcp.example.com, localhost, 192.0.2.1, "2001:db8::1", "[2001:db8::1]", 1.2.3.4., "::", "::1", "fe80::1", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "[::1"]}]}`},
	{name: "suffixes", doc: `spec: {egress: [{action: allow, suffixes: [.example.com, "*.example.com", example.com, svc, .svc.cluster.local, example.com., Example.COM]}]}`},
	{name: "cidrs", doc: `spec: {egress: [{action: deny, cidrs: [10.0.0.0/8, 0.0.0.0/0, "fd00::/8", "::/0", 192.0.2.1, "2001:db8::1", 192.0.2.1/32, "2001:db8::/128"]}]}`},
	{name: "ports-only", doc: `spec: {egress: [{action: allow, ports: [1, 443, 65535]}]}`},
	{name: "allow-with-empty-pool", doc: `spec: {egress: [{action: deny, hosts: [a.example], pool: ""}]}`},
	{name: "cluster-default-rules", cluster: true, doc: `
spec:
  default: allow
  egress:
  - {name: no-metadata, action: deny, cidrs: [169.254.169.254/32, "fd00:ec2::254/128"]}
  - {action: allow, suffixes: [.svc.cluster.local], pool: internal}`},
	{name: "intercept-every-field", doc: `
spec:
  intercept:
  - hosts: [api.openai.example, "*.partner.example", .internal.example]
    exempt: [pinned.partner.example]
    credentials:
    - {secret: openai, scheme: bearer}
    - {secret: partner.keys, scheme: raw, header: x-api-key, keys: [api-key]}
    http:
      mode: report
      default: deny
      rules:
      - {action: deny, paths: ["/v1/organization/**"]}
      - {action: allow, methods: [GET], pathPrefixes: [/v1/models]}
      - {action: allow, methods: ["*"], paths: [/v1/chat/completions, "/v1/*/embeddings"]}
  - hosts: [auth.example.com]
    credentials:
    - {secret: basic-auth, scheme: basic, keys: [user, pass]}`},
	{name: "cluster-intercept", cluster: true, doc: `
spec:
  intercept:
  - hosts: [api.vendor.example]
    credentials: [{secret: egret-system/vendor-key}]
    http: {mode: enforce, rules: [{action: deny, methods: [DELETE]}]}`},
}

var policyCRDsOnce sync.Once

// policyClient installs the policy CRDs of deploy/components/policy on the
// test API server (once) and returns a dynamic client.
func policyClient(t *testing.T) dynamic.Interface {
	t.Helper()
	kc := kubetest.Require(t)
	dyn := dynamic.NewForConfigOrDie(kc.Config)
	policyCRDsOnce.Do(func() {
		b, err := os.ReadFile("components/policy/crds.yaml")
		if err != nil {
			t.Fatal(err)
		}
		ax := apiextclient.NewForConfigOrDie(kc.Config)
		ctx := context.Background()
		for _, doc := range bytes.Split(b, []byte("\n---\n")) {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
				t.Fatal(err)
			}
			_, err := ax.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				old, gerr := ax.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
				if gerr != nil {
					t.Fatal(gerr)
				}
				crd.ResourceVersion = old.ResourceVersion
				_, err = ax.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, &crd, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Fatalf("the API server refuses CRD %s: %v", crd.Name, err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, e1 := dyn.Resource(policy.EgressPolicies).List(ctx, metav1.ListOptions{})
			_, e2 := dyn.Resource(policy.ClusterEgressPolicies).List(ctx, metav1.ListOptions{})
			if e1 == nil && e2 == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("policy CRDs not served: %v %v", e1, e2)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dyn
}

// policyObject reads a table entry as the object kubectl would send.
func policyObject(t *testing.T, doc string, cluster bool, ns string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	if u.Object == nil {
		u.Object = map[string]any{}
	}
	u.SetAPIVersion(policy.Group + "/" + policy.Version)
	if cluster {
		u.SetKind(policy.KindClusterEgressPolicy)
		if u.GetName() == "" {
			u.SetName(policy.DefaultName)
		}
	} else {
		u.SetKind(policy.KindEgressPolicy)
		if u.GetName() == "" {
			u.SetName("p")
		}
		u.SetNamespace(ns)
	}
	return u
}

// dryRunCreate is kubectl apply's first create, validated in full by the
// API server (schema, CEL, unknown fields as kubectl's default
// --validate=strict) and stored nowhere.
func dryRunCreate(dyn dynamic.Interface, u *unstructured.Unstructured) error {
	ri := dynamic.ResourceInterface(dyn.Resource(policy.ClusterEgressPolicies))
	if u.GetKind() == policy.KindEgressPolicy {
		ri = dyn.Resource(policy.EgressPolicies).Namespace(u.GetNamespace())
	}
	_, err := ri.Create(context.Background(), u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
	return err
}

// TestPolicyCRDRejectsMistakes: each wrong policy is refused by the real
// API server at apply, with the field named and the fix said.
func TestPolicyCRDRejectsMistakes(t *testing.T) {
	dyn := policyClient(t)
	ns := kubetest.Require(t).Namespace(t, "crd-wrong", nil)
	for _, tc := range wrongPolicies {
		t.Run(tc.name, func(t *testing.T) {
			err := dryRunCreate(dyn, policyObject(t, tc.doc, tc.cluster, ns))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.doc)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

type rightEntry struct {
	name    string
	cluster bool
	obj     *unstructured.Unstructured
}

// rightEntries is the right table and every policy example in docs/ and
// deploy/, with the namespaced ones in ns.
func rightEntries(t *testing.T, ns string) []rightEntry {
	t.Helper()
	var all []rightEntry
	for _, tc := range rightPolicies {
		all = append(all, rightEntry{tc.name, tc.cluster, policyObject(t, tc.doc, tc.cluster, ns)})
	}
	examples := policyExamples(t)
	if len(examples) < 4 {
		t.Fatalf("found %d policy examples in docs/ and deploy/, want at least 4 (docs/policy.md has them)", len(examples))
	}
	for _, ex := range examples {
		cluster := ex.obj.GetKind() == policy.KindClusterEgressPolicy
		if !cluster {
			ex.obj.SetNamespace(ns)
		}
		all = append(all, rightEntry{ex.where, cluster, ex.obj})
	}
	return all
}

// TestPolicyCRDAcceptsRightPolicies: the right table and every policy
// example in docs/ and deploy/ are accepted by the API server.
func TestPolicyCRDAcceptsRightPolicies(t *testing.T) {
	dyn := policyClient(t)
	ns := kubetest.Require(t).Namespace(t, "crd-right", nil)
	for _, e := range rightEntries(t, ns) {
		t.Run(e.name, func(t *testing.T) {
			if err := dryRunCreate(dyn, e.obj.DeepCopy()); err != nil {
				t.Errorf("the API server refuses it: %v", err)
			}
		})
	}
}

// TestPolicyRightTableCompiles: what the API server accepts (the table of
// TestPolicyCRDAcceptsRightPolicies) the gateway's compiler accepts too: a
// policy kubectl apply lets through is not turned into deny-all by the
// gateway. Pools are the exception: only the gateway knows its pools (nil
// here accepts any).
func TestPolicyRightTableCompiles(t *testing.T) {
	for _, e := range rightEntries(t, "ns") {
		t.Run(e.name, func(t *testing.T) {
			b, err := yaml.Marshal(e.obj.Object)
			if err != nil {
				t.Fatal(err)
			}
			var p policy.EgressPolicy
			if err := yaml.UnmarshalStrict(b, &p); err != nil {
				t.Fatalf("not a policy: %v", err)
			}
			if c := policy.Compile(&p, e.cluster, nil); c.Err != nil {
				t.Errorf("the API server accepts it, the gateway's compiler does not (%s): %v", c.Reason, c.Err)
			}
		})
	}
}

// TestPolicyCRDWrongTableFailsTheGatewayToo: what the API server refuses,
// the gateway refuses as well (but for limits only the schema has, and an
// unknown field, which the API server would prune, and the spellings
// listed): the schema adds no rule of its own invention.
func TestPolicyCRDWrongTableFailsTheGatewayToo(t *testing.T) {
	schemaOnly := map[string]bool{
		"misspelt-field": true, // pruned by a server without strict validation, ignored by the gateway
		"no-spec":        true, // an empty spec is a valid one
		// The gateway reads an empty selector, and the words in any case
		// (Deny); the schema wants them written as documented.
		"cluster-with-empty-pod-selector": true,
		"cluster-unknown-action":          true,
	}
	for _, tc := range wrongPolicies {
		if schemaOnly[tc.name] {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			u := policyObject(t, tc.doc, tc.cluster, "ns")
			b, _ := yaml.Marshal(u.Object)
			var p policy.EgressPolicy
			if err := yaml.Unmarshal(b, &p); err != nil {
				return // the wire form is wrong already
			}
			if c := policy.Compile(&p, tc.cluster, nil); c.Err == nil {
				t.Errorf("the API server refuses it but the gateway's compiler accepts it:\n%s", tc.doc)
			}
		})
	}
}

type policyExample struct {
	where string
	obj   *unstructured.Unstructured
}

// policyExamples returns every EgressPolicy and ClusterEgressPolicy in the
// Markdown of docs/ (YAML blocks, and heredocs in shell blocks) and in the
// YAML files of deploy/.
func policyExamples(t *testing.T) []policyExample {
	t.Helper()
	var out []policyExample
	add := func(where, text string) {
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
			if !strings.Contains(doc, "egret.io/v1") {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s document %d: %v", where, i, err)
			}
			if k := u.GetKind(); k == policy.KindEgressPolicy || k == policy.KindClusterEgressPolicy {
				out = append(out, policyExample{where + "#" + u.GetName(), u})
			}
		}
	}
	mds, _ := filepath.Glob("../docs/*.md")
	mds = append(mds, "../README.md")
	for _, md := range mds {
		f, err := os.Open(md)
		if err != nil {
			t.Fatal(err)
		}
		var block strings.Builder
		in, heredoc, fence := false, "", ""
		sc := bufio.NewScanner(f)
		line := 0
		for sc.Scan() {
			line++
			l := sc.Text()
			switch {
			case !in && strings.HasPrefix(l, "```"):
				in, fence = true, strings.TrimPrefix(l, "```")
				block.Reset()
			case in && l == "```":
				if fence == "yaml" {
					add(strings.TrimPrefix(md, "../")+":"+strconv.Itoa(line), block.String())
				}
				in = false
			case in && fence == "yaml":
				block.WriteString(l + "\n")
			case in && heredoc != "":
				if strings.TrimSpace(l) == heredoc {
					add(strings.TrimPrefix(md, "../")+":"+strconv.Itoa(line), block.String())
					heredoc = ""
					continue
				}
				block.WriteString(l + "\n")
			case in:
				if m := regexp.MustCompile(`<<-?'?"?(\w+)'?"?\s*$`).FindStringSubmatch(l); m != nil {
					heredoc = m[1]
					block.Reset()
				}
			}
		}
		f.Close()
	}
	filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || strings.Contains(path, "testdata") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "{{") {
			return nil // a chart template
		}
		add("deploy/"+path, string(b))
		return nil
	})
	return out
}

// TestPolicyCRDExplain: every field has a description for kubectl
// explain; one version is the storage version, and the layout is ready for
// the next version beside it.
func TestPolicyCRDExplain(t *testing.T) {
	b, err := os.ReadFile("components/policy/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
			t.Fatal(err)
		}
		storage := 0
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				storage++
			}
			var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
			walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
				for name, p := range s.Properties {
					if name == "metadata" {
						continue
					}
					if p.Description == "" {
						t.Errorf("%s %s: %s.%s has no description (kubectl explain shows nothing)", crd.Name, v.Name, path, name)
					}
					walk(path+"."+name, &p)
				}
				if s.Items != nil && s.Items.Schema != nil {
					walk(path+"[]", s.Items.Schema)
				}
				if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
					walk(path+"{}", s.AdditionalProperties.Schema)
				}
			}
			if v.Schema.OpenAPIV3Schema.Description == "" {
				t.Errorf("%s %s has no description", crd.Name, v.Name)
			}
			walk(crd.Spec.Names.Kind, v.Schema.OpenAPIV3Schema)
		}
		if storage != 1 {
			t.Errorf("%s: %d storage versions, want exactly 1", crd.Name, storage)
		}
		if crd.Spec.Conversion == nil || crd.Spec.Conversion.Strategy != apiextensionsv1.NoneConverter {
			t.Errorf("%s: conversion %+v, want strategy None stated (the place a webhook goes when v1beta2 needs one)", crd.Name, crd.Spec.Conversion)
		}
	}
}

// TestPolicyChartNeedsCEL: the chart refuses policy.enabled on a cluster
// older than 1.31, whose API server cannot compile the CRDs' isCIDR and
// isIP, with a message saying so; 1.31 renders.
func TestPolicyChartNeedsCEL(t *testing.T) {
	cmd := exec.Command(testutil.CachedTool(t, "helm"), "template", "egret", chart, "-n", "egret-system", "--kube-version", "1.30.5", "--set", "policy.enabled=true")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "policy.enabled needs Kubernetes 1.31 or later") {
		t.Errorf("helm template on 1.30 with policy.enabled: %v\n%s", err, out)
	}
	helm(t, nil, "template", "egret", chart, "-n", "egret-system", "--kube-version", "1.31.0", "--set", "policy.enabled=true")
}

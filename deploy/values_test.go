package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/testutil"
)

const (
	valuesFile = chart + "/values.yaml"
	schemaFile = chart + "/values.schema.json"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("values.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func yamlInstance(t *testing.T, y string) any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// TestValuesSchema: values.yaml passes values.schema.json; the schema
// refuses unknown keys (monitoring.enable, the example) and wrong
// types or values; every key of values.yaml is in the schema with a
// description, and every key of the schema in values.yaml (or documented
// as one without a default).
func TestValuesSchema(t *testing.T) {
	s := compileSchema(t)
	vals, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(yamlInstance(t, string(vals))); err != nil {
		t.Fatalf("values.yaml does not pass its schema: %v", err)
	}
	for _, bad := range []string{
		"monitoring: {enable: true}",
		"gateway: {replicas: \"3\"}",
		"gateway: {nodeselector: {pool: egress}}",
		"gateway: {nodeSelector: {pool: 1}}",
		"gateway: {resources: {request: {cpu: 1}}}",
		"webhook: {timeoutSeconds: 31}",
		"webhook: {port: 0}",
		"webhook: {hostNetwork: \"yes\"}",
		"mode: transparnt",
		"validation: strict",
		"imagePullSecrets: [{name: regcred}]",
		"cluster: {podCIDRs: [10.0.0.0]}",
		"certManager: {issuerRef: {name: corp, kind: Issur}}",
		"certManager: {duration: 90d}",
		"securityContext: {runAsUser: 0}",
		"sidecar: {uid: \"1337\"}",
		"image: {digest: \"sha256:abc\"}",
		"crds: {keep: \"false\"}",
		"unknownTop: 1",
	} {
		if err := s.Validate(yamlInstance(t, bad)); err == nil {
			t.Errorf("the schema accepts %s", bad)
		}
	}
	for _, good := range []string{
		"gateway: {nodeSelector: {pool: egress}, tolerations: [{key: egress, operator: Exists, effect: NoSchedule}], priorityClassName: high}",
		"webhook: {affinity: null}",
		"securityContext: {runAsUser: 10001, runAsGroup: 10001}",
		"certManager: {enabled: true, issuerRef: {name: corp-ca, kind: ClusterIssuer}}",
		"cluster: {serviceCIDRs: [10.96.0.0/12, fd00:10:96::/112], podCIDRs: [10.0.0.0/8]}",
		"imagePullSecrets: [regcred]",
		"sidecar: {resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {cpu: 1, memory: 256Mi}}}",
	} {
		if err := s.Validate(yamlInstance(t, good)); err != nil {
			t.Errorf("the schema refuses %s: %v", good, err)
		}
	}
	// values.yaml and the schema describe the same keys.
	var schema map[string]any
	b, _ := os.ReadFile(schemaFile)
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(vals, &v); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, sch map[string]any, val any)
	walk = func(path string, sch map[string]any, val any) {
		if d, _ := sch["description"].(string); d == "" && path != "" {
			t.Errorf("%s: no description in the schema", path)
		}
		props, _ := sch["properties"].(map[string]any)
		m, isMap := val.(map[string]any)
		if props == nil || !isMap || strings.HasSuffix(path, "resources") {
			return
		}
		for k, vv := range m {
			ps, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s.%s is in values.yaml, not in the schema", path, k)
				continue
			}
			walk(strings.TrimPrefix(path+"."+k, "."), ps, vv)
		}
		for k := range props {
			if _, ok := m[k]; !ok && !slices.Contains([]string{"global", "issuerRef.name", "issuerRef.kind", "issuerRef.group"}, strings.TrimPrefix(strings.TrimPrefix(path+"."+k, "."), "certManager.")) {
				t.Errorf("%s.%s is in the schema, not in values.yaml", path, k)
			}
		}
	}
	walk("", schema, v)

	// helm itself applies the schema.
	helmBin := testutil.CachedTool(t, "helm")
	cmd := exec.Command(helmBin, "template", "egret", chart, "--set", "monitoring.enable=true")
	cmd.Env = []string{"HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "enable") {
		t.Errorf("helm template --set monitoring.enable=true: %v\n%s", err, out)
	}
}

// TestValuesReference keeps docs/kubernetes.md's values reference the one
// generated from values.schema.json (descriptions, types) and values.yaml
// (defaults). EGRET_UPDATE_GOLDEN=1 rewrites it.
func TestValuesReference(t *testing.T) {
	want := valuesReference(t)
	const path = "../docs/kubernetes.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	const beginMark, endMark = "<!-- begin: helm-values", "<!-- end: helm-values -->"
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		t.Fatalf("docs/kubernetes.md lacks the %s ... %s block", beginMark, endMark)
	}
	i += strings.Index(s[i:], "\n") + 1
	if s[i:j] != want {
		if os.Getenv("EGRET_UPDATE_GOLDEN") == "1" {
			if err := os.WriteFile(path, []byte(s[:i]+want+s[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/kubernetes.md's values reference is out of date; run EGRET_UPDATE_GOLDEN=1 go test -run TestValuesReference ./deploy")
	}
}

// valuesReference renders the table: one row per key, in values.yaml's
// order (keys only the schema has after them), objects the schema closes
// opened into their keys.
func valuesReference(t *testing.T) string {
	t.Helper()
	var schema map[string]any
	b, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	vals, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(vals, &root); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	out.WriteString("| value | type | default | what |\n|---|---|---|---|\n")
	var walk func(path string, sch map[string]any, node *yamlv3.Node)
	walk = func(path string, sch map[string]any, node *yamlv3.Node) {
		props, _ := sch["properties"].(map[string]any)
		if path != "" && (props == nil || strings.HasSuffix(path, "resources")) {
			def := "—"
			if node != nil {
				var v any
				if err := node.Decode(&v); err != nil {
					t.Fatal(err)
				}
				j, _ := json.Marshal(v)
				switch {
				case string(j) == "null" || string(j) == `""`:
					def = "—"
				case len(j) > 48:
					def = "see values.yaml"
				default:
					def = "`" + string(j) + "`"
				}
			}
			desc, _ := sch["description"].(string)
			if enum, ok := sch["enum"].([]any); ok {
				var es []string
				for _, e := range enum {
					if e != "" {
						es = append(es, fmt.Sprint(e))
					}
				}
				desc += " (" + strings.Join(es, ", ") + ")"
			}
			fmt.Fprintf(&out, "| `%s` | %s | %s | %s |\n", path, schemaType(sch), def, strings.ReplaceAll(desc, "|", "\\|"))
			return
		}
		var order []string
		children := map[string]*yamlv3.Node{}
		if node != nil && node.Kind == yamlv3.MappingNode {
			for i := 0; i+1 < len(node.Content); i += 2 {
				order = append(order, node.Content[i].Value)
				children[node.Content[i].Value] = node.Content[i+1]
			}
		}
		var rest []string
		for k := range props {
			if !slices.Contains(order, k) && k != "global" {
				rest = append(rest, k)
			}
		}
		sort.Strings(rest)
		for _, k := range append(order, rest...) {
			ps, _ := props[k].(map[string]any)
			walk(strings.TrimPrefix(path+"."+k, "."), ps, children[k])
		}
	}
	walk("", schema, root.Content[0])
	return out.String()
}

func schemaType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		if t == "array" {
			if it, ok := s["items"].(map[string]any); ok && it["type"] == "string" {
				return "list of strings"
			}
			return "list"
		}
		if t == "object" && s["properties"] == nil {
			if ap, ok := s["additionalProperties"].(map[string]any); ok && ap["type"] == "string" {
				return "map of strings"
			}
		}
		return t
	case []any:
		var ts []string
		for _, x := range t {
			ts = append(ts, fmt.Sprint(x))
		}
		return strings.Join(ts, " or ")
	}
	return "any"
}

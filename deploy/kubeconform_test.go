package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
)

// writeSchemas turns the test API server's /openapi/v2 into one JSON schema
// per kind, named as kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}.json
// template expects (deployment-apps-v1.json, service-v1.json), each with
// the definitions it reaches inlined under "definitions", objects closed to unknown
// fields (what kubeconform's own -strict schemas do).
func writeSchemas(t *testing.T, kc *kubetest.Cluster, dir string, kinds map[string]bool) {
	t.Helper()
	raw, err := kc.Clientset.Discovery().RESTClient().Get().AbsPath("/openapi/v2").Do(context.Background()).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	// IntOrString is "type: string, format: int-or-string" in OpenAPI v2;
	// in JSON schema it is either.
	var fix func(v any)
	fix = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			// Strict: kubeconform -strict reads schemas that refuse unknown
			// fields (its -strict schema sets have this baked in).
			if _, ok := x["properties"]; ok {
				if _, set := x["additionalProperties"]; !set {
					x["additionalProperties"] = false
				}
			}
			if x["format"] == "int-or-string" {
				delete(x, "type")
				delete(x, "format")
				x["oneOf"] = []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}
			}
			for _, c := range x {
				fix(c)
			}
		case []any:
			for _, c := range x {
				fix(c)
			}
		}
	}
	defs := map[string]any{}
	for k, v := range doc.Definitions {
		fix(v)
		defs[k] = v
	}
	n := 0
	for _, d := range doc.Definitions {
		gvks, _ := d["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			g := g.(map[string]any)
			group, version, kind := g["group"].(string), g["version"].(string), g["kind"].(string)
			if !kinds[kind] {
				continue // only what the renderings use
			}
			name := strings.ToLower(kind)
			if group != "" {
				name += "-" + strings.Split(group, ".")[0]
			}
			name += "-" + version + ".json"
			// Only the definitions this kind reaches.
			reach := map[string]any{}
			var walk func(v any)
			walk = func(v any) {
				switch x := v.(type) {
				case map[string]any:
					if ref, ok := x["$ref"].(string); ok {
						name := strings.TrimPrefix(ref, "#/definitions/")
						if _, seen := reach[name]; !seen {
							reach[name] = defs[name]
							walk(defs[name])
						}
					}
					for _, c := range x {
						walk(c)
					}
				case []any:
					for _, c := range x {
						walk(c)
					}
				}
			}
			walk(d)
			s := map[string]any{"$schema": "http://json-schema.org/schema#", "definitions": reach}
			for k, v := range d {
				s[k] = v
			}
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n < len(kinds)-5 { // the CRD kinds have none
		t.Fatalf("only %d schemas from /openapi/v2 for %d kinds", n, len(kinds))
	}
}

// TestKubeconform runs `kubeconform -strict` on every rendering (each
// kustomization, the chart with default and with all values) against
// schemas from the test API server's OpenAPI. The CRD kinds (Prometheus
// Operator, cert-manager) have no schema there and are skipped.
func TestKubeconform(t *testing.T) {
	kc := kubetest.Require(t)
	bin := testutil.CachedTool(t, "kubeconform")
	dir := t.TempDir()
	renderings := map[string][]byte{}
	for _, k := range kustomizations {
		_, y := render(t, k)
		renderings[k] = y
	}
	renderings["helm-default"] = helm(t, nil, "template", "egret", chart, "-n", "egret-system", "--kube-version", "1.37.2")
	renderings["helm-all"] = helm(t, nil, "template", "egret", chart, "-n", "proxy-infra", "--kube-version", "1.37.2",
		"--set", "monitoring.enabled=true,certManager.enabled=true,mode=transparent,image.iptables=r/e:1-iptables,sidecar.upstreamSecret=s")
	kinds := map[string]bool{}
	for _, y := range renderings {
		for _, o := range decodeAll(t, y) {
			kinds[o.GetKind()] = true
		}
	}
	writeSchemas(t, kc, dir, kinds)
	for name, y := range renderings {
		cmd := exec.Command(bin, "-strict", "-summary", "-schema-location", dir+"/{{ .ResourceKind }}{{ .KindSuffix }}.json",
			"-skip", "PrometheusRule,ServiceMonitor,PodMonitor,Certificate,Issuer", "-")
		cmd.Stdin = bytes.NewReader(y)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("kubeconform -strict %s: %v\n%s", name, err, out)
		}
	}
	// A typo must fail: the check is real.
	bad := bytes.Replace(renderings["overlays/default"], []byte("readOnlyRootFilesystem"), []byte("readOnlyRootFilesytem"), 1)
	cmd := exec.Command(bin, "-strict", "-schema-location", dir+"/{{ .ResourceKind }}{{ .KindSuffix }}.json", "-skip", "PrometheusRule", "-")
	cmd.Stdin = bytes.NewReader(bad)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("kubeconform -strict accepted a misspelt field:\n%s", out)
	}
}

package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/testutil"
)

// TestAlertRules runs `promtool test rules` on the rendered PrometheusRule
// with components/monitoring/testdata/alerts_test.yaml, and checks that every
// alert has a test in which it fires.
func TestAlertRules(t *testing.T) {
	objs, _ := render(t, "overlays/monitoring")
	pr := find(objs, "PrometheusRule", "egret")
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	spec, _, _ := unstructured.NestedMap(pr.Object, "spec")
	rules, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("components/monitoring/testdata/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(tests, &tf); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			fires[a.Alertname] = fires[a.Alertname] || len(a.ExpAlerts) > 0
		}
	}
	groups, _, _ := unstructured.NestedSlice(spec, "groups")
	n := 0
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if name, ok := r.(map[string]any)["alert"].(string); ok {
				n++
				if !fires[name] {
					t.Errorf("alert %s has no promtool test in which it fires", name)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts")
	}
	promtool := testutil.CachedTool(t, "promtool")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

package deploy

import (
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
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

// kubePrometheusStackSelector is what a default kube-prometheus-stack
// (installed as release kube-prometheus-stack) selects PrometheusRules,
// ServiceMonitors and PodMonitors by: its release label
// (*SelectorNilUsesHelmValues: true), in every namespace.
var kubePrometheusStackSelector = labels.SelectorFromSet(labels.Set{"release": "kube-prometheus-stack"})

// healthyAlerts scrapes the running egret processes of a healthy install
// (targets: job → admin or metrics address), twice, turns what they export
// into promtool input series (each counter growing at the rate seen between
// the scrapes, up=1 for every target), and evaluates the chart's rules,
// rendered with monitoring on and kube-prometheus-stack's default
// selectors, over 40 minutes: no alert may fire.
func healthyAlerts(t *testing.T, targets map[string]string) {
	objs := helmTemplate(t, "egret-system", "monitoring.enabled=true")
	var rule *unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "PrometheusRule", "ServiceMonitor", "PodMonitor":
			if !kubePrometheusStackSelector.Matches(labels.Set(o.GetLabels())) {
				t.Errorf("%s %s (labels %v) is not selected by kube-prometheus-stack's defaults", o.GetKind(), o.GetName(), o.GetLabels())
			}
			if o.GetKind() == "PrometheusRule" {
				rule = o
			}
		}
	}
	if rule == nil {
		t.Fatal("no PrometheusRule")
	}
	scrape := func() map[string]map[string]float64 {
		out := map[string]map[string]float64{}
		for job, addr := range targets {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				t.Fatalf("scrape %s: %v", job, err)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("scrape %s: %v", job, err)
			}
			series := map[string]float64{}
			for name, f := range fams {
				for _, m := range f.GetMetric() {
					base := map[string]string{"job": job, "instance": addr, "namespace": "egret-system", "pod": job + "-0"}
					for _, l := range m.GetLabel() {
						base[l.GetName()] = l.GetValue()
					}
					add := func(n string, extra map[string]string, v float64) {
						ls := maps.Clone(base)
						maps.Copy(ls, extra)
						series[seriesName(n, ls)] = v
					}
					switch {
					case m.Counter != nil:
						add(name, nil, m.GetCounter().GetValue())
					case m.Gauge != nil:
						add(name, nil, m.GetGauge().GetValue())
					case m.Untyped != nil:
						add(name, nil, m.GetUntyped().GetValue())
					case m.Histogram != nil:
						h := m.GetHistogram()
						for _, b := range h.GetBucket() {
							add(name+"_bucket", map[string]string{"le": fmt.Sprint(b.GetUpperBound())}, float64(b.GetCumulativeCount()))
						}
						add(name+"_bucket", map[string]string{"le": "+Inf"}, float64(h.GetSampleCount()))
						add(name+"_sum", nil, h.GetSampleSum())
						add(name+"_count", nil, float64(h.GetSampleCount()))
					case m.Summary != nil:
						s := m.GetSummary()
						for _, q := range s.GetQuantile() {
							add(name, map[string]string{"quantile": fmt.Sprint(q.GetQuantile())}, q.GetValue())
						}
						add(name+"_sum", nil, s.GetSampleSum())
						add(name+"_count", nil, float64(s.GetSampleCount()))
					}
				}
			}
			series[seriesName("up", map[string]string{"job": job, "instance": addr, "namespace": "egret-system", "pod": job + "-0"})] = 1
			out[job] = series
		}
		return out
	}
	first := scrape()
	time.Sleep(2 * time.Second)
	second := scrape()
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	var alerts []string
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if a, ok := r.(map[string]any)["alert"].(string); ok {
				alerts = append(alerts, a)
			}
		}
	}
	// testFile writes the promtool test: every series the scrapes saw,
	// growing as it grew between them; webhookUp is the webhook target's up.
	n := 0
	testFile := func(webhookUp string) string {
		var b strings.Builder
		b.WriteString("rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n- interval: 1m\n  input_series:\n")
		n = 0
		for _, job := range slices.Sorted(maps.Keys(second)) {
			series := second[job]
			for _, k := range slices.Sorted(maps.Keys(series)) {
				v1 := first[job][k]
				step := series[k] - v1
				if math.IsNaN(step) || math.IsNaN(v1) {
					continue
				}
				sign := "+"
				if step < 0 {
					sign, step = "-", -step
				}
				values := promNum(v1) + sign + promNum(step) + "x40"
				if job == "egret-webhook" && strings.HasPrefix(k, "up{") {
					values = webhookUp + "x40"
				}
				fmt.Fprintf(&b, "  - series: %q\n    values: '%s'\n", k, values)
				n++
			}
		}
		b.WriteString("  alert_rule_test:\n")
		for _, a := range alerts {
			for _, at := range []string{"10m", "39m"} {
				fmt.Fprintf(&b, "  - {eval_time: %s, alertname: %s, exp_alerts: []}\n", at, a)
			}
		}
		return b.String()
	}
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	rules, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "healthy_test.yaml"), []byte(testFile("1")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.CachedTool(t, "promtool"), "test", "rules", "healthy_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules over a healthy install's scrape: %v\n%s", err, out)
	}
	// The check can fail: the webhook's target down makes EgretWebhookDown fire.
	down := testFile("0")
	if err := os.WriteFile(filepath.Join(dir, "down_test.yaml"), []byte(down), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(testutil.CachedTool(t, "promtool"), "test", "rules", "down_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "EgretWebhookDown") {
		t.Errorf("promtool with the webhook down: %v (EgretWebhookDown should fire)\n%.1500s", err, out)
	}
	t.Logf("promtool: %d alerts silent over %d series scraped from %d egret processes: %s", len(alerts), n, len(targets), strings.TrimSpace(string(out)))
}

// seriesName is a series in promtool's notation, labels sorted.
func seriesName(name string, ls map[string]string) string {
	var b strings.Builder
	b.WriteString(name + "{")
	for i, k := range slices.Sorted(maps.Keys(ls)) {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%q", k, ls[k])
	}
	return b.String() + "}"
}

// promNum writes a value in promtool's expanding notation (no exponent).
func promNum(v float64) string {
	if math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// TestRunbook: every alert's runbook_url is a section of docs/kubernetes.md's
// runbook (its GitHub anchor) with a symptom, a query and a fix.
func TestRunbook(t *testing.T) {
	objs, _ := render(t, "overlays/monitoring")
	doc, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	rb := strings.Index(s, "\n## Runbook\n")
	if rb < 0 {
		t.Fatal("docs/kubernetes.md has no Runbook section")
	}
	s = s[rb:]
	if i := strings.Index(s[1:], "\n## "); i > 0 {
		s = s[:i+1]
	}
	groups, _, _ := unstructured.NestedSlice(find(objs, "PrometheusRule", "egret").Object, "spec", "groups")
	const base = "https://github.com/egret-io/egret/blob/main/docs/kubernetes.md#"
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			name, ok := rule["alert"].(string)
			if !ok {
				continue
			}
			url, _ := rule["annotations"].(map[string]any)["runbook_url"].(string)
			if url != base+strings.ToLower(name) {
				t.Errorf("%s: runbook_url %q, want %s%s", name, url, base, strings.ToLower(name))
			}
			i := strings.Index(s, "\n### "+name+"\n")
			if i < 0 {
				t.Errorf("%s: no section ### %s in the runbook", name, name)
				continue
			}
			sec := s[i+1:]
			if j := strings.Index(sec[1:], "\n### "); j > 0 {
				sec = sec[:j+1]
			}
			for _, want := range []string{"- **Symptom**: ", "- **Query**: `", "- **Fix**: "} {
				if !strings.Contains(sec, want) {
					t.Errorf("%s: the runbook section lacks %q", name, want)
				}
			}
		}
	}
}

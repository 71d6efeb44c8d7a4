package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDeployUsesCatalog checks that every egret_ metric the PrometheusRule
// and the Grafana dashboard in deploy/ use is one this catalog exports.
func TestDeployUsesCatalog(t *testing.T) {
	names := New("test").Names()
	files, _ := filepath.Glob("../../deploy/components/monitoring/*")
	if len(files) == 0 {
		t.Fatal("no monitoring files found")
	}
	re := regexp.MustCompile(`\begret_[a-z_]+`)
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.IsDir() {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range re.FindAllString(string(b), -1) {
			base := n
			for _, sfx := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, sfx)
			}
			if strings.HasPrefix(n, "egret_grafana") || strings.HasPrefix(n, "egret_system") {
				continue
			}
			if !slices.Contains(names, n) && !slices.Contains(names, base) {
				t.Errorf("%s uses %s, which egret does not export", filepath.Base(f), n)
			}
		}
	}
}

func TestLabelsAreBounded(t *testing.T) {
	if StatusClass(299) != "2xx" || StatusClass(0) != "error" || StatusClass(999) != "other" || Code(1000) != "other" {
		t.Error("label helpers")
	}
}

// TestInterceptLabelsBounded: the interception metrics carry only their
// fixed label values, whatever the engine reports (an unknown handshake
// failure is "other", an unknown verdict dropped), and nothing until the
// engine is installed.
func TestInterceptLabelsBounded(t *testing.T) {
	m := New("test")
	count := func() (int, map[string]float64) {
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n, vals := 0, map[string]float64{}
		for _, mf := range mfs {
			if !strings.HasPrefix(mf.GetName(), "egret_intercept_") {
				continue
			}
			for _, s := range mf.GetMetric() {
				n++
				key := mf.GetName()
				for _, l := range s.GetLabel() {
					key += "," + l.GetName() + "=" + l.GetValue()
				}
				vals[key] = s.GetCounter().GetValue() + s.GetGauge().GetValue()
			}
		}
		return n, vals
	}
	if n, _ := count(); n != 0 {
		t.Errorf("%d interception series before SetIntercept", n)
	}
	m.SetIntercept(func() InterceptSample {
		return InterceptSample{Handshakes: map[string]uint64{"ok": 5, "weird/reason": 2, "other": 1, "sni_mismatch": 3},
			OriginHandshakes: 4, OriginResumed: 1, Requests: map[string]uint64{"allowed": 7, "Bearer sk-x": 9},
			LeavesSigned: 2, LeafCacheHits: 3, LeavesCached: 2}
	})
	n, vals := count()
	if want := len(InterceptHandshakeResults) + 2 + len(InterceptVerdicts) + 3; n != want {
		t.Errorf("%d series, want %d", n, want)
	}
	for k, want := range map[string]float64{
		"egret_intercept_handshakes_total,result=other": 3, "egret_intercept_handshakes_total,result=sni_mismatch": 3,
		"egret_intercept_origin_handshakes_total,resumed=false": 3, "egret_intercept_requests_total,verdict=allowed": 7,
		"egret_intercept_leaf_cache_entries": 2,
	} {
		if vals[k] != want {
			t.Errorf("%s = %v, want %v", k, vals[k], want)
		}
	}
	for k := range vals {
		if strings.Contains(k, "sk-x") || strings.Contains(k, "weird") {
			t.Errorf("an unbounded label value was exported: %s", k)
		}
	}
}

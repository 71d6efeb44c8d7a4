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

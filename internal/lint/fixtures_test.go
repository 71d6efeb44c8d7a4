package lint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// brokenWant lists, per fixture in testdata/broken, exactly the rules that
// must fire on it. Each file holds one classic mistake.
var brokenWant = map[string][]string{
	"case-mismatch.yaml":            {idCaseMismatch},
	"cidr-python.yaml":              {idNoProxyIgnored},
	"config-files.yaml":             {idConfigFileNoProxy, idConfigFileCredentials, idConfigFileProxy, idContainerdMirror},
	"maven-no-proxy.yaml":           {idMavenSettingsProxy},
	"dependent-vars-unencoded.yaml": {idURLUnencoded},
	"credentials-in-value.yaml":     {idCredentialsCleartext, idCredentialsInValue},
	"curl-uppercase.yaml":           {idCurlUpper},
	"gateway-weak.yaml":             {idGatewayAntiAffinity, idGatewayNetworkPolicy, idGatewayPDB, idGatewayReplicas},
	"jvm-no-properties.yaml":        {idJVMProxyProps},
	"jvm-non-proxy-hosts.yaml":      {idJVMHTTPSNonProxy, idJVMNonProxyHosts},
	"list-kind.json":                {idNoProxyMissing, idURLScheme},
	"no-proxy-incomplete.yaml":      {idNoProxyIncomplete},
	"no-proxy-missing.yaml":         {idNoProxyMissing},
	"node-no-env-proxy.yaml":        {idNodeEnvProxy},
	"proxy-objects-unused.yaml":     {idCredentialsCleartext, idCredentialsInValue, idURLUnencoded, idCaseMismatch},
	"references.yaml":               {idRefMissing, idRefUnresolved},
	"sidecar-plain.yaml":            {idSidecarNotNative},
	"single-case.yaml":              {idSingleCase},
	"unencoded-password.yaml":       {idCredentialsCleartext, idURLUnencoded},
}

func lintFiles(t *testing.T, paths ...string) ([]Object, []Finding) {
	t.Helper()
	objs, err := ReadPaths(paths, nil)
	if err != nil {
		t.Fatalf("read %v: %v", paths, err)
	}
	fs, err := Check(objs, Options{})
	if err != nil {
		t.Fatalf("check %v: %v", paths, err)
	}
	return objs, fs
}

func TestBrokenFixtures(t *testing.T) {
	entries, err := os.ReadDir("testdata/broken")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(brokenWant) {
		t.Errorf("testdata/broken has %d files, brokenWant lists %d", len(entries), len(brokenWant))
	}
	for _, e := range entries {
		name := e.Name()
		t.Run(strings.TrimSuffix(strings.TrimSuffix(name, ".yaml"), ".json"), func(t *testing.T) {
			want, ok := brokenWant[name]
			if !ok {
				t.Fatalf("no expectation for %s", name)
			}
			_, fs := lintFiles(t, filepath.Join("testdata/broken", name))
			got := map[string]bool{}
			for _, f := range fs {
				got[f.Rule] = true
				if f.File == "" || f.Line <= 0 {
					t.Errorf("%s: finding %s has no location (file %q, line %d)", name, f.Rule, f.File, f.Line)
				}
				if f.Message == "" || f.Object.Kind == "" || f.Object.Name == "" {
					t.Errorf("%s: finding %+v lacks message or object", name, f)
				}
			}
			var gotIDs []string
			for id := range got {
				gotIDs = append(gotIDs, id)
			}
			sort.Strings(gotIDs)
			if !reflect.DeepEqual(gotIDs, want) {
				t.Errorf("rules fired on %s = %v, want %v\n%s", name, gotIDs, want, textOf(fs))
			}
		})
	}
}

func textOf(fs []Finding) string {
	var b bytes.Buffer
	_ = WriteText(&b, fs, 0, "")
	return b.String()
}

func TestGoodFixturesStayQuiet(t *testing.T) {
	entries, err := os.ReadDir("testdata/good")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Run(strings.TrimSuffix(e.Name(), ".yaml"), func(t *testing.T) {
			objs, fs := lintFiles(t, filepath.Join("testdata/good", e.Name()))
			if len(objs) == 0 {
				t.Fatal("no objects read")
			}
			if len(fs) > 0 {
				t.Errorf("a correct manifest yields findings:\n%s", textOf(fs))
			}
		})
	}
}

// TestNoProxyFromConfigMapJudgedOnValue checks that a NO_PROXY taken from a
// ConfigMap in the input is judged on its real value: the good fixture stays
// quiet, and the same workload with an incomplete ConfigMap value does not.
func TestNoProxyFromConfigMapJudgedOnValue(t *testing.T) {
	data, err := os.ReadFile("testdata/good/app-configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.ReplaceAll(string(data), ",.svc,.cluster.local,", ",")
	if broken == string(data) {
		t.Fatal("fixture changed: no .svc,.cluster.local to remove")
	}
	objs, err := Read("inline.yaml", []byte(broken))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := Check(objs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fs {
		found = found || (f.Rule == idNoProxyIncomplete && f.Severity == Error && strings.Contains(f.Message, ".svc"))
	}
	if !found {
		t.Fatalf("incomplete NO_PROXY from a ConfigMap not reported:\n%s", textOf(fs))
	}
	for _, f := range fs {
		if f.Rule == idRefUnresolved {
			t.Errorf("ConfigMap in the input reported as unresolved: %+v", f)
		}
	}
}

// goldenDocsBase is the absolute docs base the SARIF goldens are written with.
const goldenDocsBase = "https://github.com/egret-io/egret/blob/main/docs/lint.md"

func TestGoldenReports(t *testing.T) {
	for _, dir := range []string{"broken", "good"} {
		objs, fs := lintFiles(t, filepath.Join("testdata", dir))
		t.Run(dir+"-text", func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteText(&b, fs, len(objs), ""); err != nil {
				t.Fatal(err)
			}
			golden(t, dir+".text.golden", b.Bytes())
		})
		t.Run(dir+"-json", func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteJSON(&b, fs, ""); err != nil {
				t.Fatal(err)
			}
			golden(t, dir+".json.golden", b.Bytes())
			var arr []map[string]any
			if err := json.Unmarshal(b.Bytes(), &arr); err != nil {
				t.Fatalf("JSON output is not an array of objects: %v", err)
			}
			if arr == nil {
				t.Fatal("JSON output is null, want an array")
			}
			for _, f := range arr {
				for _, k := range []string{"rule", "severity", "message", "file", "object"} {
					if s, _ := f[k].(string); s == "" {
						t.Errorf("finding %v lacks %q", f, k)
					}
				}
			}
		})
		t.Run(dir+"-sarif", func(t *testing.T) {
			var b bytes.Buffer
			// An absolute docs base, as code scanning wants it (--docs-base).
			if err := WriteSARIF(&b, fs, "dev", goldenDocsBase); err != nil {
				t.Fatal(err)
			}
			golden(t, dir+".sarif.golden", b.Bytes())
		})
	}
}

package noproxy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// vector is one row of noproxy-vectors.json (and of testdata/vectors-extra.json).
type vector struct {
	ID      any               `json:"id"`
	NoProxy *string           `json:"no_proxy"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Note    string            `json:"note"`
	Expect  map[string]string `json:"expect"`
}

// Proxies used by the vectors: A in lower-case variables (and both cases in
// the default setup), B in upper-case ones.
const (
	proxyA = "http://127.0.0.1:9"
	proxyB = "http://127.0.0.1:8"
)

// env returns the process environment of a vector.
func (v vector) env() Env {
	if v.Env != nil {
		env := Env{}
		for k, val := range v.Env {
			env[k] = val
		}
		return env
	}
	env := Env{"http_proxy": proxyA, "HTTP_PROXY": proxyA, "https_proxy": proxyA, "HTTPS_PROXY": proxyA}
	if v.NoProxy != nil {
		env["no_proxy"], env["NO_PROXY"] = *v.NoProxy, *v.NoProxy
	}
	return env
}

// moduleRoot finds the directory holding go.mod.
func moduleRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

// sharedVectorsPath finds shared/spec/noproxy-vectors.json, the table
// testdata/noproxy-vectors.json is copied from: $EGRET_SHARED_DIR/spec, or
// a shared directory beside the clone or beside one of its parents (a git
// worktree). It returns "" when there is none (a user's clone).
func sharedVectorsPath(t testing.TB) string {
	const rel = "shared/spec/noproxy-vectors.json"
	if d := os.Getenv("EGRET_SHARED_DIR"); d != "" {
		return filepath.Join(d, "spec", "noproxy-vectors.json")
	}
	for dir := filepath.Dir(moduleRoot(t)); ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
}

func loadVectors(t testing.TB, path string) []vector {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read vectors: %v", err)
	}
	var vs []vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return vs
}

// knownDeviations are cells of the shared vectors where the real client, run
// on this machine, disagrees with the shared table; the model follows the
// real client. Key: "<vector id>/<column>".
var knownDeviations = map[string]string{
	// The shared table's Node column came from an older ProxyConfig whose
	// ".x" entries were a raw endsWith. Node 24.22.3 and 26.12.1 (run by
	// TestDifferentialNode) require a label boundary: ".example.com" does
	// not cover notexample.com.
	"6/nodecore": "A",
}

func expectResult(code string) (Decision, string) {
	switch code {
	case "D":
		return DecisionDirect, ""
	case "A":
		return DecisionProxy, proxyA
	case "B":
		return DecisionProxy, proxyB
	case "E":
		return DecisionError, ""
	}
	return 0, ""
}

func checkVectors(t *testing.T, vs []vector) {
	byColumn := map[string]Client{}
	for _, c := range Clients() {
		byColumn[c.Column] = c
	}
	cells := 0
	for _, v := range vs {
		name := fmt.Sprintf("%v-%s", v.ID, kebab(v.Note))
		t.Run(name, func(t *testing.T) {
			for col, code := range v.Expect {
				c, ok := byColumn[col]
				if !ok {
					t.Fatalf("vector column %q has no client", col)
				}
				if dev, ok := knownDeviations[fmt.Sprintf("%v/%s", v.ID, col)]; ok {
					code = dev
				}
				wantD, wantP := expectResult(code)
				r, err := c.Decide(v.URL, v.env())
				if err != nil {
					t.Fatalf("%s: %v", c.Name, err)
				}
				cells++
				if r.Decision != wantD || (wantD == DecisionProxy && r.Proxy != wantP) {
					t.Errorf("%s (%s): got %s %q (%s), want %s", c.Name, col, r.Decision, r.Proxy, r.Reason, code)
				}
				if r.Reason == "" {
					t.Errorf("%s: empty reason", c.Name)
				}
			}
		})
	}
	if cells == 0 {
		t.Fatal("no vector cell checked")
	}
}

// sharedCopy is the repository's copy of the shared vectors (see
// testdata/README.md).
var sharedCopy = filepath.Join("testdata", "noproxy-vectors.json")

func TestSharedVectors(t *testing.T) {
	checkVectors(t, loadVectors(t, sharedCopy))
}

// TestSharedVectorsCopy says whether testdata's copy still equals the
// shared table it was copied from, when that table is present.
func TestSharedVectorsCopy(t *testing.T) {
	path := sharedVectorsPath(t)
	if path == "" {
		t.Skip("no shared/spec/noproxy-vectors.json beside the clone (set EGRET_SHARED_DIR): only the copy in testdata is checked")
	}
	shared, own := loadVectors(t, path), loadVectors(t, sharedCopy)
	key := func(v vector) string { return fmt.Sprint(v.ID) }
	byID := map[string]vector{}
	for _, v := range own {
		byID[key(v)] = v
	}
	var diffs []string
	for _, v := range shared {
		o, ok := byID[key(v)]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("row %s is only in %s", key(v), path))
		case !reflect.DeepEqual(o, v):
			diffs = append(diffs, fmt.Sprintf("row %s differs", key(v)))
		}
		delete(byID, key(v))
	}
	for id := range byID {
		diffs = append(diffs, fmt.Sprintf("row %s is only in %s", id, sharedCopy))
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Errorf("%s is out of date with %s (copy it again, see testdata/README.md):\n%s", sharedCopy, path, strings.Join(diffs, "\n"))
	}
}

func TestExtraVectors(t *testing.T) {
	checkVectors(t, loadVectors(t, filepath.Join("testdata", "vectors-extra.json")))
}

// kebab turns a note into a subtest name.
func kebab(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

func TestJavaVectors(t *testing.T) {
	checkVectors(t, loadVectors(t, filepath.Join("testdata", "vectors-java.json")))
}

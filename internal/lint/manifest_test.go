package lint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const multiDoc = `# leading comment
---
apiVersion: v1
kind: ConfigMap
metadata: {name: one, namespace: a}
data: {k: v}
---
# an empty document
---
apiVersion: v1
kind: Pod
metadata:
  name: two
spec:
  containers:
    - name: c
      image: busybox
      env:
        - name: A
          value: "1"
        - name: B
          value: "2"
...
---
replicaCount: 3   # a values file: not a Kubernetes object
`

func TestReadMultiDocument(t *testing.T) {
	objs, err := Read("m.yaml", []byte(multiDoc))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("read %d objects, want 2", len(objs))
	}
	if objs[0].Kind != "ConfigMap" || objs[0].Line != 3 || objs[0].Namespace != "a" {
		t.Errorf("first object = %+v", objs[0])
	}
	p := objs[1]
	if p.Kind != "Pod" || p.Name != "two" || p.Line != 10 {
		t.Errorf("second object = %+v", p)
	}
	for _, tc := range []struct {
		path string
		line int
	}{
		{"", 10},
		{"spec", 14},
		{"spec.containers[0]", 16},
		{"spec.containers[0].env[1]", 21},
		{"spec.containers[0].env[1].value", 22},
		{"spec.containers[0].env[7]", 18},        // missing item: its list
		{"spec.initContainers[0]", 14},           // missing key: its parent
		{"spec.template.spec.containers[0]", 14}, // wrong shape: deepest match
	} {
		if got := p.LineOf(tc.path); got != tc.line {
			t.Errorf("LineOf(%q) = %d, want %d", tc.path, got, tc.line)
		}
	}
}

func TestReadShapes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		kinds   string // comma-separated kinds read
		wantErr string // substring of the error, "" for none
	}{
		{name: "yaml-list-kind", in: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: b}\n", kinds: "Pod,Deployment"},
		{name: "typed-list-kind", in: `{"apiVersion":"v1","kind":"PodList","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}]}`, kinds: "Pod"},
		{name: "json-stream", in: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}` + "\n" + `{"apiVersion":"v1","kind":"Service","metadata":{"name":"b"}}`, kinds: "Pod,Service"},
		{name: "json-with-tabs", in: "{\n\t\"apiVersion\": \"v1\",\n\t\"kind\": \"Pod\",\n\t\"metadata\": {\"name\": \"a\"}\n}\n", kinds: "Pod"},
		{name: "empty", in: "", kinds: ""},
		{name: "only-comments", in: "# nothing\n---\n# still nothing\n", kinds: ""},
		{name: "not-kubernetes", in: "foo: bar\n", kinds: ""},
		{name: "scalar-document", in: "just a string\n", wantErr: "not a mapping"},
		{name: "syntax-error", in: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [a\n", wantErr: "parse YAML"},
		{name: "bad-json", in: `{"apiVersion": "v1", "kind": "Pod"`, wantErr: "parse"},
		{name: "non-string-keys", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  1: one\n  true: yes\n", kinds: "ConfigMap"},
		{name: "helm-template", in: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}\n", wantErr: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Read("in", []byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				var pe *ParseError
				if !errors.As(err, &pe) || pe.File != "in" {
					t.Errorf("error %v is not a *ParseError naming the file", err)
				}
				return
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.Kind)
			}
			if tc.name == "helm-template" {
				// {{ .x }} is a YAML flow mapping with a non-string key: accepted
				// as data, checked like any other object.
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got := strings.Join(kinds, ","); got != tc.kinds {
				t.Errorf("kinds = %q, want %q", got, tc.kinds)
			}
		})
	}
}

func TestReadAliasBombIsBounded(t *testing.T) {
	bomb := `a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
apiVersion: v1
kind: ConfigMap
`
	start := time.Now()
	_, err := Read("bomb.yaml", []byte(bomb))
	if err == nil {
		t.Fatal("alias bomb accepted")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("alias bomb took %v", d)
	}
}

func TestReadPaths(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + "}\n"
	}
	write("a.yaml", pod("a"))
	write("sub/b.yml", pod("b"))
	write("sub/deeper/c.json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"c"}}`)
	write("sub/readme.md", pod("not-read"))
	write(".git/d.yaml", pod("hidden"))
	write("sub/.hidden/e.yaml", pod("hidden"))

	objs, err := ReadPaths([]string{dir, "-"}, strings.NewReader(pod("stdin")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		rel, _ := filepath.Rel(dir, o.File)
		if o.File == "stdin" {
			rel = "stdin"
		}
		got = append(got, o.Name+"@"+filepath.ToSlash(rel))
	}
	want := "a@a.yaml,b@sub/b.yml,c@sub/deeper/c.json,stdin@stdin"
	if strings.Join(got, ",") != want {
		t.Errorf("read %v, want %s", got, want)
	}

	_, err = ReadPaths([]string{filepath.Join(dir, "missing.yaml")}, nil)
	var pe *ParseError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: error %v", err)
	}
}

func TestCheckDecodeErrorKeepsOthers(t *testing.T) {
	in := "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec: {containers: 7}\n---\n" +
		"apiVersion: v1\nkind: Pod\nmetadata: {name: good}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    env: [{name: HTTPS_PROXY, value: 'http://p:1'}]\n"
	objs, err := Read("x.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := Check(objs, Options{})
	if err == nil || !strings.Contains(err.Error(), "x.yaml:1") {
		t.Errorf("decode error = %v, want one at x.yaml:1", err)
	}
	if len(fs) == 0 || fs[0].Object.Name != "good" || fs[0].Line != 13 {
		t.Errorf("the good pod was not checked or misplaced: %+v", fs)
	}
}

// FuzzRead feeds arbitrary bytes to the manifest reader and the rules: no
// input may panic, and every finding must point inside the input.
func FuzzRead(f *testing.F) {
	f.Add([]byte(multiDoc))
	for _, dir := range []string{"testdata/broken", "testdata/good"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"env":[{"name":"HTTP_PROXY","value":"http://a:b@c"}]}]}}]}`))
	f.Add([]byte("apiVersion: v1\nkind: Pod\nspec: &s {containers: [{name: a, env: [{name: NO_PROXY, value: '$(X'}]}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, _ := Read("fuzz.yaml", data)
		fs, _ := Check(objs, Options{})
		lines := strings.Count(string(data), "\n") + 1
		for _, fd := range fs {
			if fd.Line < 0 || fd.Line > lines {
				t.Fatalf("finding at line %d of a %d-line input: %+v", fd.Line, lines, fd)
			}
			if fd.Rule == "" || fd.Message == "" {
				t.Fatalf("empty finding %+v", fd)
			}
		}
	})
}

package lint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestSARIFValidAgainstSchema validates the SARIF output for every fixture
// directory against the SARIF 2.1.0 JSON schema (vendored from npm, see
// testdata/sarif-schema-2.1.0.README) and checks what GitHub code scanning
// needs beyond the schema.
func TestSARIFValidAgainstSchema(t *testing.T) {
	f, err := os.Open("testdata/sarif-schema-2.1.0.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("sarif-schema-2.1.0.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("sarif-schema-2.1.0.json")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("schema-rejects-a-bad-level", func(t *testing.T) {
		// Guard against a schema that accepts anything.
		bad := `{"version":"2.1.0","runs":[{"tool":{"driver":{"name":"egret"}},"results":[{"ruleId":"x","level":"fatal","message":{"text":"m"}}]}]}`
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(bad)))
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(inst); err == nil {
			t.Fatal("schema accepted level \"fatal\"")
		}
	})
	for _, tc := range []struct{ name, dir, docsBase string }{
		{"broken", "testdata/broken", goldenDocsBase},
		{"good", "testdata/good", goldenDocsBase},
		{"broken-relative-docs", "testdata/broken", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, fs := lintFiles(t, tc.dir)
			var b bytes.Buffer
			if err := WriteSARIF(&b, fs, "dev", tc.docsBase); err != nil {
				t.Fatal(err)
			}
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(inst); err != nil {
				t.Fatalf("SARIF output does not validate: %v", err)
			}
			var log sarifLog
			if err := json.Unmarshal(b.Bytes(), &log); err != nil {
				t.Fatal(err)
			}
			run := log.Runs[0]
			if len(run.Tool.Driver.Rules) != len(Rules()) {
				t.Errorf("driver lists %d rules, want %d", len(run.Tool.Driver.Rules), len(Rules()))
			}
			for _, r := range run.Tool.Driver.Rules {
				if r.Help.Text == "" || r.ShortDescription.Text == "" || !strings.Contains(r.Help.Text, "See "+DocsURL(tc.docsBase, r.ID)) {
					t.Errorf("rule %s lacks help, a docs link or a description", r.ID)
				}
				// helpUri must be an absolute URI: set for an absolute base,
				// left out for the relative default.
				if wantURI := tc.docsBase != ""; (r.HelpURI != "") != wantURI {
					t.Errorf("rule %s: helpUri %q with docs base %q", r.ID, r.HelpURI, tc.docsBase)
				}
			}
			if len(run.Results) != len(fs) {
				t.Errorf("%d results for %d findings", len(run.Results), len(fs))
			}
			for _, res := range run.Results {
				if run.Tool.Driver.Rules[res.RuleIndex].ID != res.RuleID {
					t.Errorf("result %s has ruleIndex %d pointing at %s", res.RuleID, res.RuleIndex, run.Tool.Driver.Rules[res.RuleIndex].ID)
				}
				pl := res.Locations[0].PhysicalLocation
				if pl == nil || pl.ArtifactLocation.URI == "" || pl.Region == nil || pl.Region.StartLine < 1 {
					t.Errorf("result %s lacks a file and line: %+v", res.RuleID, res.Locations)
				} else if _, err := os.Stat(filepath.FromSlash(pl.ArtifactLocation.URI)); err != nil {
					t.Errorf("result %s points at %q, which is not a file relative to the run: %v", res.RuleID, pl.ArtifactLocation.URI, err)
				}
			}
		})
	}
}

func TestArtifactURI(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"relative", "deploy/app.yaml", "deploy/app.yaml"},
		{"dot-slash", "./deploy/app.yaml", "deploy/app.yaml"},
		{"space", "my deploy/a b.yaml", "my%20deploy/a%20b.yaml"},
		{"colon-first-segment", "c:app.yaml", "c%3Aapp.yaml"},
		{"absolute", "/srv/app.yaml", "file:///srv/app.yaml"},
		{"stdin", "stdin", "stdin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := artifactURI(tc.in); got != tc.want {
				t.Errorf("artifactURI(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

package intercept

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDocsExample compiles the site of docs/interception.md's example, so
// the page shows what the engine takes.
func TestDocsExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/interception.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "compiles this block):\n\n```yaml\n")
	if i < 0 {
		t.Fatal("docs/interception.md: the example's block is gone")
	}
	block := doc[i+len("compiles this block):\n\n```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	var spec SiteSpec
	if err := yaml.UnmarshalStrict([]byte(block), &spec); err != nil {
		t.Fatal(err)
	}
	site, err := CompileSite(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !site.Matches("api.openai.example") || !site.IsExempt("pinned.openai.example") || len(site.Credentials) != 1 ||
		site.Credentials[0].Header != "Authorization" || len(site.Rules.List) != 3 || site.Rules.Default != Deny {
		t.Errorf("site %+v", site)
	}
	for _, tc := range []struct {
		method, path string
		denied       bool
	}{{"GET", "/v1/models/gpt", false}, {"POST", "/v1/chat/completions", false}, {"POST", "/v1/x/embeddings", false},
		{"GET", "/v1/organization/users", true}, {"DELETE", "/v1/models/gpt", true}} {
		if v := site.Rules.Decide(tc.method, tc.path); v.Denied != tc.denied {
			t.Errorf("%s %s: %+v", tc.method, tc.path, v)
		}
	}
}

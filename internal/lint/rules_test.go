package lint

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

func TestRuleCatalog(t *testing.T) {
	id := regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	if !sort.SliceIsSorted(rules, func(i, j int) bool { return rules[i].ID < rules[j].ID }) {
		t.Error("rules are not sorted by ID")
	}
	seen := map[string]bool{}
	for _, r := range rules {
		t.Run(r.ID, func(t *testing.T) {
			if !id.MatchString(r.ID) {
				t.Errorf("ID %q is not kebab-case", r.ID)
			}
			if seen[r.ID] {
				t.Errorf("duplicate rule %s", r.ID)
			}
			seen[r.ID] = true
			if (r.pod == nil) == (r.set == nil) {
				t.Error("a rule needs exactly one of pod and set")
			}
			if r.Severity < Info || r.Severity > Error || r.Summary == "" || len(r.Help) < 80 {
				t.Errorf("rule lacks severity, summary or help: %+v", r)
			}
			if got, ok := RuleByID(r.ID); !ok || got.ID != r.ID {
				t.Error("RuleByID does not find it")
			}
		})
	}
}

// rulesMarkdown is the rule reference README.md must contain.
func rulesMarkdown() string {
	var b strings.Builder
	for _, r := range rules {
		fmt.Fprintf(&b, "#### `%s`\n\n%s (%s, %s rule). %s\n\n", r.ID, upperFirst(r.Summary), r.Severity, r.Scope(), r.Help)
	}
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// TestREADMEDocumentsEveryRule keeps README.md's rule reference (the docs
// link of every finding) in step with the code.
func TestREADMEDocumentsEveryRule(t *testing.T) {
	const readme, begin, end = "../../docs/lint.md", "<!-- lint-rules:begin -->\n", "<!-- lint-rules:end -->"
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("docs/lint.md lacks the %q ... %q markers in the lint section", begin, end)
	}
	want := rulesMarkdown()
	if got := s[i+len(begin) : j]; got != want {
		if os.Getenv("EGRET_UPDATE_GOLDEN") == "1" {
			if err := os.WriteFile(readme, []byte(s[:i+len(begin)]+want+s[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/lint.md rule reference is out of date (EGRET_UPDATE_GOLDEN=1 rewrites it)")
	}
}

package noproxy

import (
	"regexp"
	"strings"
	"testing"
)

var fixEntryRE = regexp.MustCompile("`([^`]+)`")

// TestLintFollowsItsOwnAdvice applies every entry Lint recommends for an
// empty NO_PROXY and lints the result again: Lint must not then warn about
// the entries it recommended, nor recommend entries already listed.
func TestLintFollowsItsOwnAdvice(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts LintOptions
	}{
		{"all-clients", LintOptions{}},
		{"python-node", LintOptions{Clients: []string{"python-urllib", "python-requests", "node-http", "undici-7.22"}}},
		{"go-curl", LintOptions{Clients: []string{"go", "curl"}, ClusterDomain: "corp.example"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var recommended []string
			seen := map[string]bool{}
			for _, f := range Lint("", tt.opts) {
				if f.Rule != RuleMissingEssential {
					continue
				}
				for _, m := range fixEntryRE.FindAllStringSubmatch(f.Fix, -1) {
					if !seen[m[1]] {
						seen[m[1]] = true
						recommended = append(recommended, m[1])
					}
				}
			}
			if !seen["::1"] || !seen["[::1]"] && tt.name != "go-curl" {
				t.Fatalf("recommended %v: want ::1 and [::1] among them", recommended)
			}
			value := strings.Join(recommended, ",")
			for _, f := range Lint(value, tt.opts) {
				if f.Rule == RuleUnreadableEntry {
					t.Errorf("Lint(%q) warns about an entry it recommended: %+v", value, f)
				}
				if f.Severity == SeverityError && !strings.Contains(f.Fix, "cannot be made") {
					t.Errorf("Lint(%q) still reports an error after its own fixes: %+v", value, f)
				}
				if strings.HasPrefix(f.Fix, "add ") || strings.HasPrefix(f.Fix, "list both ") {
					missing := false
					for _, m := range fixEntryRE.FindAllStringSubmatch(f.Fix, -1) {
						if !seen[m[1]] {
							missing = true
						}
					}
					if !missing {
						t.Errorf("Lint(%q) recommends entries that are all listed already: %+v", value, f)
					}
				}
			}
		})
	}
}

func TestLintBracketedIPv6(t *testing.T) {
	tests := []struct {
		name     string
		value    string
		wantRule string // a finding for entry "[fd00::1]" with this rule, "" = none
		wantFix  string // substring of its fix
	}{
		{"alone-warns-and-recommends-bare", "[fd00::1]", RuleUnreadableEntry, "add `fd00::1` beside it"},
		{"with-bare-quiet", "fd00::1,[fd00::1]", "", ""},
		{"with-bare-other-address-warns", "fd00::2,[fd00::1]", RuleUnreadableEntry, "add `fd00::1`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *Finding
			for _, f := range Lint(tt.value, LintOptions{SkipEssentials: true}) {
				if f.Entry == "[fd00::1]" {
					f := f
					got = &f
				}
				if f.Entry == "fd00::1" && strings.Contains(f.Fix, "list both") {
					t.Errorf("recommends the pair that is already listed: %+v", f)
				}
			}
			switch {
			case tt.wantRule == "" && got != nil:
				t.Errorf("unexpected finding %+v", *got)
			case tt.wantRule != "" && got == nil:
				t.Errorf("no finding for [fd00::1]")
			case tt.wantRule != "" && (got.Rule != tt.wantRule || !strings.Contains(got.Fix, tt.wantFix)):
				t.Errorf("got %+v, want rule %s with fix containing %q", *got, tt.wantRule, tt.wantFix)
			}
		})
	}
}

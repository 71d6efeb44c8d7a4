package noproxy

import (
	"regexp"
	"strings"
	"testing"
)

var backtick = regexp.MustCompile("`([^`]+)`")

// applyFix does what a finding's fix says to a NO_PROXY value, when the fix
// is an edit of the list: "list both `a` and `b`", "list `a` too", "add `a`
// beside it", "write `a` instead (and `b` ...)". ok is false for advice
// that is not an edit.
func applyFix(value string, f Finding) (string, bool) {
	fix := f.Fix
	names := backtick.FindAllStringSubmatch(fix, -1)
	if len(names) == 0 {
		return value, false
	}
	var add []string
	for _, m := range names {
		add = append(add, m[1])
	}
	switch {
	case strings.HasPrefix(fix, "list both "), strings.HasPrefix(fix, "add "), strings.HasPrefix(fix, "if ") && strings.Contains(fix, " too"):
		return WithEntries(value, add...), true
	case strings.HasPrefix(fix, "write "):
		var kept []string
		for _, e := range strings.Split(value, ",") {
			if strings.TrimSpace(e) != f.Entry {
				kept = append(kept, e)
			}
		}
		return WithEntries(strings.Join(kept, ","), add...), true
	}
	return value, false
}

// TestLintFixesSettle applies every edit a finding suggests and lints
// again: the finding it answered is gone, and no finding suggests that same
// edit again (the NP002 fix "list both `svc` and `.svc`" used to warn again
// once applied).
func TestLintFixesSettle(t *testing.T) {
	values := []string{"svc", ".svc", "*.svc", "corp.example", "*.corp.example", ".corp.example",
		"localhost,::1", "fd00::1", "10.0.0.0/8", "example.com:8080", "svc,.svc.cluster.local"}
	applied := 0
	for _, v := range values {
		for _, f := range Lint(v, LintOptions{SkipEssentials: true}) {
			next, ok := applyFix(v, f)
			if !ok {
				continue
			}
			applied++
			for _, g := range Lint(next, LintOptions{SkipEssentials: true}) {
				if g.Rule == f.Rule && g.Fix == f.Fix {
					t.Errorf("%q: fix %q applied (%q), and it is suggested again: %s", v, f.Fix, next, g.Message)
				}
				if g.Rule == f.Rule && g.Message == f.Message {
					t.Errorf("%q: after %q (%q) the finding stays: %s", v, f.Fix, next, g.Message)
				}
			}
		}
	}
	if applied < 5 {
		t.Fatalf("only %d fixes were edits: the test checks nothing", applied)
	}
}

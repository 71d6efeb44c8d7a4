package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// componentDocs are the references under docs/ of egret's components: each
// has the same fixed sections, as CoreDNS's plugin READMEs do.
var componentDocs = []string{"proxy", "pools", "policy", "transparent", "noproxy", "lint", "doctor", "node", "trust", "kubernetes"}

var h2 = regexp.MustCompile(`(?m)^## (.+)$`)

// TestComponentDocSections: every component reference opens with
// "## Description", has a syntax or configuration section ("## Syntax…" or
// "## Configuration…"), "## Examples…", and ends with "## Tests" (which
// names the tests behind what the page says). Other sections go between.
func TestComponentDocSections(t *testing.T) {
	for _, name := range componentDocs {
		b, err := os.ReadFile("../../docs/" + name + ".md")
		if err != nil {
			t.Fatal(err)
		}
		var heads []string
		// Headings inside code blocks (shell comments) are not sections.
		inCode := false
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "```") {
				inCode = !inCode
				continue
			}
			if m := h2.FindStringSubmatch(l); m != nil && !inCode {
				heads = append(heads, m[1])
			}
		}
		has := func(prefixes ...string) bool {
			for _, h := range heads {
				for _, p := range prefixes {
					if strings.HasPrefix(h, p) {
						return true
					}
				}
			}
			return false
		}
		switch {
		case len(heads) == 0 || heads[0] != "Description":
			t.Errorf("docs/%s.md: the first section is %q, want Description (sections %q)", name, first(heads), heads)
		case heads[len(heads)-1] != "Tests":
			t.Errorf("docs/%s.md: the last section is %q, want Tests", name, heads[len(heads)-1])
		}
		if !has("Syntax", "Configuration") {
			t.Errorf("docs/%s.md: no Syntax… or Configuration… section (sections %q)", name, heads)
		}
		if !has("Examples") {
			t.Errorf("docs/%s.md: no Examples section (sections %q)", name, heads)
		}
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

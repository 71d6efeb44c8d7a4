package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"egret.io/egret/internal/cli"
	"egret.io/egret/internal/lint"
)

// TestTroubleshootingCommandsExist: every `egret …` command of
// docs/troubleshooting.md's table names a real command and real flags.
func TestTroubleshootingCommandsExist(t *testing.T) {
	b, err := os.ReadFile("../../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds := regexp.MustCompile("`(?:[^`]*?/)?egret ([^`]+)`").FindAllStringSubmatch(string(b), -1)
	if len(cmds) < 15 {
		t.Fatalf("only %d commands found", len(cmds))
	}
	// And every lint rule it names exists.
	for _, m := range regexp.MustCompile(`rules? \(?((?:`+"`[a-z0-9-]+`"+`(?:, )?)+)`).FindAllStringSubmatch(string(b), -1) {
		for _, id := range strings.Split(m[1], ", ") {
			if _, ok := lint.RuleByID(strings.Trim(id, "`")); !ok {
				t.Errorf("lint rule %s does not exist", id)
			}
		}
	}
	for _, m := range cmds {
		words := strings.Fields(m[1])
		root := cli.NewRoot()
		c, rest, err := root.Find(words)
		if err != nil || c == root {
			t.Errorf("egret %s: no such command (%v)", m[1], err)
			continue
		}
		for _, w := range rest {
			if !strings.HasPrefix(w, "--") {
				continue
			}
			name := strings.TrimPrefix(strings.SplitN(w, "=", 2)[0], "--")
			if c.Flags().Lookup(name) == nil && c.InheritedFlags().Lookup(name) == nil {
				t.Errorf("egret %s: %s has no flag --%s", m[1], c.CommandPath(), name)
			}
		}
	}
}

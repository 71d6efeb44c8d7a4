package config

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEKeys keeps README's table of environment variables and flags
// identical to Keys. EGRET_UPDATE_GOLDEN=1 rewrites it.
func TestREADMEKeys(t *testing.T) {
	const path = "../../docs/proxy.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	const beginMark, endMark = "<!-- begin: proxy-keys", "<!-- end: proxy-keys -->"
	i := strings.Index(s, beginMark)
	j := strings.Index(s, endMark)
	if i < 0 || j < i {
		t.Fatalf("docs/proxy.md lacks the %s ... %s block", beginMark, endMark)
	}
	i += strings.Index(s[i:], "\n") + 1
	var tb strings.Builder
	tb.WriteString("| variable | flag | meaning |\n|---|---|---|\n")
	for _, k := range Keys {
		name := "`" + k.Env + "`"
		for _, a := range k.Aliases {
			name += " (or `" + a + "`)"
		}
		flag := "—"
		if k.Flag != "" {
			flag = "`--" + k.Flag + "`"
		}
		tb.WriteString("| " + name + " | " + flag + " | " + strings.ReplaceAll(k.Help, "|", "\\|") + " |\n")
	}
	want := tb.String()
	if got := s[i:j]; got != want {
		if os.Getenv("EGRET_UPDATE_GOLDEN") == "1" {
			if err := os.WriteFile(path, []byte(s[:i]+want+s[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/proxy.md's key table is out of date; run EGRET_UPDATE_GOLDEN=1 go test ./internal/config")
	}
}

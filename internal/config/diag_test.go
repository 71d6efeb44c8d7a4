package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileProblems: one run reports every problem of a file, each with
// file:line:column, the key path, what was expected and, for unknown keys,
// the known key meant; the errors of the values' meaning come with them.
func TestFileProblems(t *testing.T) {
	const file = `version: 1
role: gatewy
listen: 3128
limits:
  max_tunnels: ten
  max_tunels: 5
  per_client: {max_concurent: 3}
timeouts:
  dial: 10
drain:
  period: soon
routes:
  - hosts: [a.example]
    action: sideways
  - hosts: [b.example]
    acton: direct
log:
  level: loud
  acess: true
pools:
  p: [http://a:1]
`
	p := filepath.Join(t.TempDir(), "egret.yaml")
	if err := os.WriteFile(p, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(Sources{File: p, Env: func(string) (string, bool) { return "", false }, DefaultCredentialsDir: "-"})
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		p + `:2:7: role: role "gatewy": want sidecar or gateway`,
		p + `:3:9: listen: want a string, got the integer 3128 (quote it: "3128")`,
		p + `:5:16: limits.max_tunnels: want an integer, got the string "ten"`,
		p + `:6:3: limits.max_tunels: unknown key "max_tunels"; did you mean "max_tunnels"?`,
		p + `:7:16: limits.per_client.max_concurent: unknown key "max_concurent"; did you mean "max_concurrent"?`,
		p + `:9:9: timeouts.dial: want a string, got the integer 10 (quote it: "10")`,
		p + `:11:11: drain.period: config drain_period: "soon" is not a duration like 10s or 1m30s`,
		p + `:14:13: routes[0].action: config routes[0]: unknown route action "sideways"`,
		p + `:16:5: routes[1].acton: unknown key "acton"; did you mean "action"?`,
		p + `:18:10: log.level: log level "loud": want debug, info, warn or error`,
		p + `:19:3: log.acess: unknown key "acess"; did you mean "access"?`,
		p + `:21:6: pools.p: want a mapping (key: value lines), got a list`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if i >= len(lines) || !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d:\n got %q\nwant %q", i+1, lines[min(i, len(lines)-1)], w)
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "json:") || strings.Contains(l, "Go struct") {
			t.Errorf("Go, not YAML: %s", l)
		}
	}
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != len(want) || ps[2].Path != "limits.max_tunnels" || ps[2].Line != 5 {
		t.Errorf("Problems: %#v", ps)
	}
}

func TestParseFileProblems(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"role: [a\n", "line 1:1: not valid YAML"},
		{"version: 2\n", "line 1:10: version: version 2 is not supported (want 1)"},
		{"listen: a\nlisten: b\n", `line 2:1: listen: given twice (first on line 1)`},
		{"zzz: 1\n", `unknown key "zzz" (known here: admin_listen,`},
		{"direct: {ports: [x]}\n", `line 1:18: direct.ports[0]: want an integer, got the string "x"`},
		{"log: {access: maybe}\n", `log.access: want true or false, got the string "maybe"`},
		{"pools: {p: {members: ['http://a:1 weight=2', {url: 'http://b:1'}]}}\n", ""},
	} {
		_, err := ParseFile([]byte(tt.in))
		if tt.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %q", tt.in, err, tt.want)
		}
	}
}

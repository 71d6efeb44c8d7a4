package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUsageErrorsExit2: every usage error, whichever command, exits 2 with
// one clear message; an unknown command or flag names the one meant.
func TestUsageErrorsExit2(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "egret.yaml")
	os.WriteFile(bad, []byte("limits:\n  max_tunels: 5\n"), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"prxy"}, "Did you mean this?\n\tproxy"},
		{[]string{"proxy", "--lisen", ":1"}, "unknown flag: --lisen; did you mean --listen? (egret proxy --help lists them)"},
		{[]string{"node", "render", "--runtim", "containerd"}, "did you mean --runtime? (egret node render --help"},
		{[]string{"doctor", "--ech", "http://x/"}, "did you mean --echo?"},
		{[]string{"lint", "--outptu", "json"}, "did you mean --output?"},
		{[]string{"noproxy", "explain"}, "egret noproxy explain: accepts 1 arg(s), received 0"},
		{[]string{"noproxy", "render", "a", "b"}, "accepts 1 arg(s)"},
		{[]string{"version", "-o", "yaml"}, `unknown output format "yaml"`},
		{[]string{"proxy", "--config"}, "flag needs an argument: --config"},
		{[]string{"proxy", "--config", bad}, bad + `:2:3: limits.max_tunels: unknown key "max_tunels"; did you mean "max_tunnels"?`},
		{[]string{"iptables", "apply", "--backend", "nope", "--redirect-port", "15001", "--dry-run"}, "backend"},
		{[]string{"proxy", "--max-tunnels", "x", "--listen", "127.0.0.1:0"}, "EGRET_MAX_TUNNELS"},
		{[]string{"echo", "--zzz"}, "unknown flag: --zzz (egret echo --help lists the flags)"},
	} {
		var out, errw bytes.Buffer
		code := Main(tt.args, strings.NewReader(""), &out, &errw)
		if code != 2 || !strings.Contains(errw.String(), tt.want) {
			t.Errorf("egret %s: exit %d, stderr %q; want 2 and %q", strings.Join(tt.args, " "), code, errw.String(), tt.want)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errw bytes.Buffer
		if code := Main(args, nil, &out, &errw); code != 0 || !strings.HasPrefix(out.String(), "egret ") || !strings.Contains(out.String(), "go1.") {
			t.Errorf("egret %v: exit %d, %q %q", args, code, out.String(), errw.String())
		}
	}
	var out bytes.Buffer
	if code := Main([]string{"version", "-o", "json"}, nil, &out, &out); code != 0 || !strings.Contains(out.String(), `"go_version": "go1.`) {
		t.Errorf("version -o json: %d %s", code, out.String())
	}
}

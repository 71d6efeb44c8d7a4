package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"egret.io/egret/internal/config"
)

// helpOf runs `egret ARGS --help` as a user would and returns what it
// prints.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	var out, errw bytes.Buffer
	if code := Main(append(args, "--help"), strings.NewReader(""), &out, &errw); code != 0 {
		t.Fatalf("egret %s --help: exit %d, %s", strings.Join(args, " "), code, errw.String())
	}
	return out.String()
}

// flagLine returns the --help line of flag name.
func flagLine(help, name string) string {
	re := regexp.MustCompile(`(?m)^\s+(-., )?--` + regexp.QuoteMeta(name) + `\b.*$`)
	return strings.TrimSpace(re.FindString(help))
}

// TestHelpValueNames: every flag of every command names its value with one
// word (pflag takes the first `quoted` word of the usage as the value's
// name, so a quoted phrase printed `--echo egret echo`), and every help
// text runs.
func TestHelpValueNames(t *testing.T) {
	word := regexp.MustCompile(`^[A-Za-z0-9_.:|/-]*$`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		help := helpOf(t, path...)
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); !word.MatchString(name) {
				t.Errorf("egret %s --help: --%s takes %q, not one word: %s", strings.Join(path, " "), f.Name, name, flagLine(help, f.Name))
			}
		})
		for _, sub := range c.Commands() {
			if !sub.Hidden && sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub)
			}
		}
	}
	walk(NewRoot())
}

// TestHelpDoctorEcho: the doctor's --echo takes a URL.
func TestHelpDoctorEcho(t *testing.T) {
	if l := flagLine(helpOf(t, "doctor"), "echo"); !strings.HasPrefix(l, "--echo URL ") || !strings.Contains(l, "egret echo server") {
		t.Errorf("doctor --help: %q; want --echo URL   URL of an egret echo server ...", l)
	}
}

// TestHelpProxyFlagTypes: `egret proxy --help` names what each flag takes —
// not "string" for every one — and a true/false flag takes no value.
func TestHelpProxyFlagTypes(t *testing.T) {
	help := helpOf(t, "proxy")
	for flag, want := range map[string]string{
		"max-tunnels":  "--max-tunnels int ",
		"dial-timeout": "--dial-timeout duration ",
		"dest-rate":    "--dest-rate rate ",
		"direct-cidrs": "--direct-cidrs cidrs ",
		"listen":       "--listen addr ",
		"upstream":     "--upstream urls ",
		"hosts-file":   "--hosts-file file ",
		"role":         "--role sidecar|gateway ",
		"pprof":        "--pprof ",
		"ssrf-guard":   "--ssrf-guard ",
	} {
		if l := flagLine(help, flag); !strings.HasPrefix(l+" ", want) || strings.Contains(l, "[=") {
			t.Errorf("proxy --help: %q; want it to start %q", l, want)
		}
	}
	for _, k := range config.Keys {
		if k.Flag == "" {
			continue
		}
		if k.Type == "" || k.Type == "string" {
			t.Errorf("config key %s (--%s) has no Type for --help", k.Env, k.Flag)
		}
		if (k.Type == "bool") != k.Bool {
			t.Errorf("config key %s: Type %q but Bool %v", k.Env, k.Type, k.Bool)
		}
		if l := flagLine(help, k.Flag); l == "" {
			t.Errorf("proxy --help has no --%s", k.Flag)
		} else if strings.HasPrefix(l, "--"+k.Flag+" string") {
			t.Errorf("proxy --help: %q types the flag as string", l)
		}
	}
	// The value still reaches the configuration as text.
	var out, errw bytes.Buffer
	if code := Main([]string{"proxy", "--max-tunnels", "x", "--listen", "127.0.0.1:0"}, strings.NewReader(""), &out, &errw); code != 2 ||
		!strings.Contains(errw.String(), "EGRET_MAX_TUNNELS") {
		t.Errorf("proxy --max-tunnels x: exit %d, %s", code, errw.String())
	}
}

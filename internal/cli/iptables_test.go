package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"egret.io/egret/internal/iptables"
)

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestIptablesPrint checks the printed text against the package's rules for
// the SPEC's flag set, the dry-run forms, JSON, and bad flags (exit 1).
func TestIptablesPrint(t *testing.T) {
	spec := iptables.Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: 15001, ExcludeCIDRs: []string{"10.96.0.0/12", "10.244.0.0/16"}}
	cfg, err := spec.Compile()
	if err != nil {
		t.Fatal(err)
	}
	want := "# ipv4: iptables-restore --noflush\n" + iptables.Build(cfg, iptables.IPv4).RestoreText()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"print", []string{"iptables", "print", "--exclude-cidrs", "10.96.0.0/12,10.244.0.0/16"}, want},
		{"apply-dry-run-spec-contract", []string{"iptables", "apply", "--proxy-uid", "1337", "--redirect-port", "15001",
			"--exclude-cidrs", "10.96.0.0/12,10.244.0.0/16", "--dry-run"}, want},
		{"remove-dry-run", []string{"iptables", "remove", "--proxy-uid", "1337", "--redirect-port", "15001",
			"--exclude-cidrs", "10.96.0.0/12,10.244.0.0/16", "--dry-run"},
			"# ipv4: iptables-restore --noflush\n" + iptables.Build(cfg, iptables.IPv4).RemoveText()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runMain(tc.args...)
			if code != 0 || out != tc.want {
				t.Fatalf("exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errOut, out, tc.want)
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		code, out, _ := runMain("iptables", "print", "--ipv6", "-o", "json")
		var rep iptablesReport
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("exit %d: %s", code, out)
		}
		if len(rep.Families) != 2 || rep.Families[1].Family != "ipv6" || !rep.DryRun || len(rep.Families[0].Rules) == 0 {
			t.Fatalf("report %+v", rep)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad-cidr", []string{"iptables", "print", "--exclude-cidrs", "10.0.0.0/40"}, "not a CIDR"},
		{"bad-port", []string{"iptables", "print", "--redirect-port", "0"}, "redirect-port 0"},
		{"bad-backend", []string{"iptables", "print", "--backend", "ebpf"}, "want auto, nft or legacy"},
		{"bad-output", []string{"iptables", "print", "-o", "yaml"}, "want text or json"},
		{"probe-addr-excluded", []string{"iptables", "validate", "--exclude-cidrs", "192.0.2.0/24", "--probe-addr", "192.0.2.1:80"}, "never redirect"},
		{"probe-addr-malformed", []string{"iptables", "validate", "--probe-addr", "192.0.2.1"}, "want IP:PORT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runMain(tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q, want 2 (a usage error) and %q", code, errOut, tc.want)
			}
		})
	}
}

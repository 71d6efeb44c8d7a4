package discovery_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"egret.io/egret/internal/cli"
	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/testutil/kubetest"
)

// TestNoproxyDiscoverCommand runs `egret noproxy discover --kubeconfig` against
// the real API server.
func TestNoproxyDiscoverCommand(t *testing.T) {
	c := kubetest.Require(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
		stderr   string
	}{
		{
			name:     "text",
			args:     []string{"--kubeconfig", c.Kubeconfig},
			contains: []string{"localhost,127.0.0.1,::1,[::1],", ",10.96.0.0/16,10.96.0.1,", ",169.254.169.254,fd00:ec2::254,[fd00:ec2::254]\n"},
		},
		{
			name:     "other-domain-and-pod-flag",
			args:     []string{"--kubeconfig", c.Kubeconfig, "--cluster-domain", "corp.example", "--pod-cidr", "10.42.0.0/16", "--metadata-address="},
			contains: []string{",.svc.corp.example,.corp.example,", ",10.42.0.0/16\n"},
		},
		{
			name:     "json",
			args:     []string{"--kubeconfig", c.Kubeconfig, "-o", "json"},
			contains: []string{`"entry": "10.96.0.0/16"`, `"servicecidr/kubernetes"`},
		},
		{name: "bad-output", args: []string{"--kubeconfig", c.Kubeconfig, "-o", "yaml"}, code: 2, stderr: `-o "yaml"`},
		{name: "bad-cidr", args: []string{"--kubeconfig", c.Kubeconfig, "--service-cidr", "10.0.0.0/99"}, code: 2, stderr: "--service-cidr"},
		{name: "no-kubeconfig", args: []string{"--kubeconfig", "/nonexistent/kubeconfig"}, code: 1, stderr: "load kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := cli.Main(append([]string{"noproxy", "discover"}, tt.args...), nil, &out, &errb)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tt.code, errb.String())
			}
			for _, s := range tt.contains {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, out.String())
				}
			}
			if !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", errb.String(), tt.stderr)
			}
			if tt.name == "json" {
				var r discovery.Result
				if err := json.Unmarshal(out.Bytes(), &r); err != nil || len(r.Entries) < 10 {
					t.Errorf("json: %v, %d entries", err, len(r.Entries))
				}
			}
		})
	}
}

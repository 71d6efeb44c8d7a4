package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const lintBroken = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: busybox
        env:
        - {name: HTTPS_PROXY, value: "http://proxy:3128"}
        - {name: https_proxy, value: "http://proxy:3128"}
`

const lintGood = `apiVersion: v1
kind: Pod
metadata: {name: ok}
spec:
  containers:
  - name: c
    image: busybox
`

const lintWarnOnly = `apiVersion: v1
kind: Pod
metadata: {name: warn}
spec:
  containers:
  - name: c
    image: busybox
    env:
    - {name: HTTPS_PROXY, value: "http://proxy:3128"}
    - {name: NO_PROXY, value: "localhost,127.0.0.1,::1,.svc,.cluster.local,kubernetes,kubernetes.default,kubernetes.default.svc,169.254.169.254"}
    - {name: no_proxy, value: "localhost,127.0.0.1,::1,.svc,.cluster.local,kubernetes,kubernetes.default,kubernetes.default.svc,169.254.169.254"}
`

func TestLintCommandExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		stdin    string
		code     int
		stdout   string // substring
		stderr   string // substring
		jsonRule string // with -o json: a rule that must be in the array
	}{
		{name: "error-finding-exits-1", args: []string{"lint", "-"}, stdin: lintBroken, code: 1, stdout: "[no-proxy-missing] Deployment/shop/web, container web"},
		{name: "clean-exits-0", args: []string{"lint", "-"}, stdin: lintGood, code: 0, stdout: "0 errors, 0 warnings, 0 info in 1 object"},
		{name: "warnings-exit-0", args: []string{"lint", "-"}, stdin: lintWarnOnly, code: 0, stdout: "proxy-var-single-case"},
		{name: "json-array", args: []string{"lint", "-o", "json", "-"}, stdin: lintBroken, code: 1, jsonRule: "no-proxy-missing"},
		{name: "json-empty-array", args: []string{"lint", "-o", "json", "-"}, stdin: lintGood, code: 0, stdout: "[]"},
		{name: "sarif", args: []string{"lint", "-o", "sarif", "-"}, stdin: lintBroken, code: 1, stdout: `"ruleId": "no-proxy-missing"`},
		{name: "cluster-flags", args: []string{"lint", "--cluster-cidrs", "10.96.0.0/12", "--api-server-ip", "10.96.0.1", "-"}, stdin: lintWarnOnly, code: 1, stdout: "cluster range 10.96.0.0/12 is not in NO_PROXY"},
		{name: "metadata-address-flag", args: []string{"lint", "--metadata-address", "fd00:ec2::254", "-"}, stdin: lintWarnOnly, code: 1, stdout: "add fd00:ec2::254,[fd00:ec2::254]"},
		{name: "metadata-address-empty-checks-none", args: []string{"lint", "--metadata-address", "", "-"}, stdin: strings.ReplaceAll(lintWarnOnly, ",169.254.169.254", ""), code: 0, stdout: "0 errors"},
		{name: "metadata-address-default-checked", args: []string{"lint", "-"}, stdin: strings.ReplaceAll(lintWarnOnly, ",169.254.169.254", ""), code: 1, stdout: "add 169.254.169.254"},
		{name: "bad-metadata-address-exits-2", args: []string{"lint", "--metadata-address", "metadata.google.internal", "-"}, code: 2, stderr: "--metadata-address"},
		{name: "docs-default-relative", args: []string{"lint", "-"}, stdin: lintBroken, code: 1, stdout: "see docs/lint.md#no-proxy-missing"},
		{name: "docs-base-flag", args: []string{"lint", "--docs-base", "https://docs.example/egret/README.md", "-o", "sarif", "-"}, stdin: lintBroken, code: 1, stdout: `"helpUri": "https://docs.example/egret/README.md#no-proxy-missing"`},
		{name: "parse-error-exits-2", args: []string{"lint", "-"}, stdin: "kind: Pod\n  bad: [\n", code: 2, stderr: "stdin:"},
		{name: "missing-file-exits-2", args: []string{"lint", "/nonexistent/egret.yaml"}, code: 2, stderr: "no such file"},
		{name: "empty-input-warns", args: []string{"lint", "-"}, stdin: "# nothing\n", code: 0, stdout: "in 0 objects", stderr: "no Kubernetes objects"},
		{name: "no-args-exits-2", args: []string{"lint"}, code: 2, stderr: "at least one"},
		{name: "bad-output-exits-2", args: []string{"lint", "-o", "xml", "-"}, code: 2, stderr: "unknown output format"},
		{name: "bad-cidr-exits-2", args: []string{"lint", "--cluster-cidrs", "10.0.0.0/33", "-"}, code: 2, stderr: "--cluster-cidrs"},
		{name: "unknown-flag-exits-2", args: []string{"lint", "--nope", "-"}, code: 2, stderr: "unknown flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(tc.args, strings.NewReader(tc.stdin), &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out.String(), errb.String())
			}
			if !strings.Contains(out.String(), tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, out.String())
			}
			if !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, errb.String())
			}
			if tc.jsonRule != "" {
				var arr []struct {
					Rule, Severity, Message, File, Object string
				}
				if err := json.Unmarshal(out.Bytes(), &arr); err != nil {
					t.Fatalf("stdout is not a JSON array: %v", err)
				}
				found := false
				for _, f := range arr {
					found = found || (f.Rule == tc.jsonRule && f.File == "stdin" && f.Object == "Deployment/shop/web" && f.Severity == "error")
				}
				if !found {
					t.Errorf("no %s finding in %s", tc.jsonRule, out.String())
				}
			}
		})
	}
}

package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// offline are Deps that never touch the network or the real system: no
// runtime on PATH, a resolver that knows nothing, a dialer that refuses.
func offline(t *testing.T, env ...string) Deps {
	t.Helper()
	dir := t.TempDir()
	rc := filepath.Join(dir, "resolv.conf")
	os.WriteFile(rc, []byte("search shop.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"), 0o644)
	return Deps{
		Environ:     env,
		PID1Environ: filepath.Join(dir, "proc1", "environ"),
		ResolvConf:  rc,
		Resolver:    nxResolver{},
		Dial:        refuseDial,
		LookPath:    func(string) (string, error) { return "", os.ErrNotExist },
	}
}

func runNamed(t *testing.T, o Options, d Deps, name string) []Outcome {
	t.Helper()
	outs, err := Run(context.Background(), o, d)
	if err != nil {
		t.Fatal(err)
	}
	var got []Outcome
	for _, out := range outs {
		if out.Name == name {
			got = append(got, out)
		}
	}
	if len(got) == 0 {
		t.Fatalf("no %s check ran", name)
	}
	return got
}

func TestEnvCheck(t *testing.T) {
	const np = "localhost,127.0.0.1,::1,[::1],.svc,.cluster.local,kubernetes,kubernetes.default,kubernetes.default.svc,kubernetes.default.svc.cluster.local,169.254.169.254"
	tests := []struct {
		name    string
		env     []string
		status  Status
		summary string
		advice  string
	}{
		{"both-cases-agree", []string{"HTTPS_PROXY=http://u:pw@gw:3128", "https_proxy=http://u:pw@gw:3128", "NO_PROXY=" + np, "no_proxy=" + np}, Pass, "both cases", ""},
		{"cases-differ", []string{"HTTPS_PROXY=http://gw:3128", "https_proxy=http://other:3128", "NO_PROXY=" + np, "no_proxy=" + np}, Fail,
			"HTTPS_PROXY and https_proxy differ", "Go, reqwest and global-agent read HTTPS_PROXY"},
		{"no-proxy-differs-only-in-spacing-is-fine", []string{"HTTP_PROXY=http://gw:3128", "http_proxy=http://gw:3128", "NO_PROXY=.svc, .cluster.local", "no_proxy=.svc,.cluster.local"}, Pass, "", ""},
		{"upper-only-http", []string{"HTTP_PROXY=http://gw:3128", "NO_PROXY=" + np, "no_proxy=" + np}, Warn, "only HTTP_PROXY is set (curl and wget ignore", "Set http_proxy"},
		{"proxy-without-no-proxy", []string{"HTTPS_PROXY=http://gw:3128", "https_proxy=http://gw:3128"}, Fail, "NO_PROXY is empty", ""},
		{"nothing-set", []string{"PATH=/bin"}, Warn, "no proxy variable", "transparent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := runNamed(t, Options{}, offline(t, tt.env...), "env")[0]
			if o.Status != tt.status || !strings.Contains(o.Summary, tt.summary) || !strings.Contains(o.Advice, tt.advice) {
				t.Errorf("got %s %q / %q", o.Status, o.Summary, o.Advice)
			}
			if strings.Contains(strings.Join(o.Details, "\n")+o.Summary, "pw@") {
				t.Errorf("password shown: %q", o.Details)
			}
		})
	}
}

func TestPID1Check(t *testing.T) {
	shell := []string{"HTTPS_PROXY=http://u:s3cret@gw:3128", "https_proxy=http://u:s3cret@gw:3128", "NO_PROXY=.svc", "no_proxy=.svc", "HOME=/root", "TERM=xterm"}
	tests := []struct {
		name    string
		pid1    string // NUL-separated; "-" = no file
		status  Status
		summary []string
	}{
		{"same-proxy-vars-other-vars-differ", "HTTPS_PROXY=http://u:s3cret@gw:3128\x00https_proxy=http://u:s3cret@gw:3128\x00NO_PROXY=.svc\x00no_proxy=.svc\x00HOME=/app\x00", Pass, []string{"same proxy variables"}},
		{"exported-in-shell-only", "HTTPS_PROXY=http://u:s3cret@gw:3128\x00NO_PROXY=.svc\x00no_proxy=.svc\x00", Fail, []string{"https_proxy is set in this shell but not for PID 1"}},
		{"java-password-property-redacted", "HTTPS_PROXY=http://u:s3cret@gw:3128\x00https_proxy=http://u:s3cret@gw:3128\x00NO_PROXY=.svc\x00no_proxy=.svc\x00JAVA_TOOL_OPTIONS=-Dhttps.proxyHost=gw -Dhttps.proxyPassword=s3cret\x00", Fail,
			[]string{"JAVA_TOOL_OPTIONS is set for PID 1"}},
		{"entrypoint-changed-no-proxy", "HTTPS_PROXY=http://u:s3cret@gw:3128\x00https_proxy=http://u:s3cret@gw:3128\x00NO_PROXY=.cluster.local\x00no_proxy=.svc\x00JAVA_TOOL_OPTIONS=-Dhttps.proxyHost=gw\x00", Fail,
			[]string{"NO_PROXY differs", "JAVA_TOOL_OPTIONS is set for PID 1 but not in this shell"}},
		{"missing-file", "-", Warn, []string{"does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := offline(t, shell...)
			if tt.pid1 != "-" {
				os.MkdirAll(filepath.Dir(d.PID1Environ), 0o755)
				os.WriteFile(d.PID1Environ, []byte(tt.pid1), 0o644)
				os.WriteFile(filepath.Join(filepath.Dir(d.PID1Environ), "cmdline"), []byte("java\x00-jar\x00app.jar\x00"), 0o644)
			}
			o := runNamed(t, Options{}, d, "pid1-env")[0]
			if o.Status != tt.status {
				t.Errorf("status %s, want %s: %s", o.Status, tt.status, o.Summary)
			}
			for _, s := range tt.summary {
				if !strings.Contains(o.Summary, s) {
					t.Errorf("summary %q lacks %q", o.Summary, s)
				}
			}
			all := o.Summary + strings.Join(o.Details, "\n") + o.Advice
			if strings.Contains(all, "s3cret") {
				t.Errorf("password shown: %s", all)
			}
			if tt.pid1 != "-" && !strings.Contains(all, "PID 1: java -jar app.jar") {
				t.Errorf("PID 1's command not shown: %q", o.Details)
			}
		})
	}
}

func TestNoProxyCheckAndRuntimeDetection(t *testing.T) {
	d := offline(t, "HTTPS_PROXY=http://gw:3128", "https_proxy=http://gw:3128", "NO_PROXY=.svc", "no_proxy=.svc", "KUBERNETES_SERVICE_HOST=10.96.0.1")
	d.LookPath = func(f string) (string, error) {
		if f == "python3" || f == "java" {
			return "/usr/bin/" + f, nil
		}
		return "", os.ErrNotExist
	}
	o := runNamed(t, Options{}, d, "no-proxy")[0]
	if o.Status != Fail || !strings.Contains(o.Advice, ".cluster.local") || !strings.Contains(o.Advice, "10.96.0.1") || !strings.Contains(o.Advice, "169.254.169.254") {
		t.Errorf("got %s %q / %q", o.Status, o.Summary, o.Advice)
	}
	if !strings.Contains(o.Details[0], "go, python-urllib, python-requests, java") {
		t.Errorf("runtimes not detected from PATH: %q", o.Details[0])
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    Options
		want string
	}{
		{"echo-not-a-url", Options{Echo: "ftp://x/"}, "--echo"},
		{"echo-with-credentials", Options{Echo: "http://u:p@x/"}, "user info"},
		{"bad-internal", Options{Internal: []string{"x:0"}}, "--internal"},
		{"bad-proxy", Options{Proxy: "gopher://x"}, "--proxy"},
		{"unknown-client", Options{Clients: []string{"lynx"}}, "--client"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Checks(tt.o, offline(t)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestRunChecks(t *testing.T) {
	checks := []Check{
		{Name: "slow-a", Run: func(ctx context.Context) Result {
			time.Sleep(300 * time.Millisecond)
			return Result{Status: Pass, Summary: "a"}
		}},
		{Name: "panics", Run: func(ctx context.Context) Result { panic("boom") }},
		{Name: "hangs", Run: func(ctx context.Context) Result { time.Sleep(10 * time.Second); return Result{Status: Pass} }},
		{Name: "honours-ctx", Run: func(ctx context.Context) Result { <-ctx.Done(); return Result{Status: Warn, Summary: "gave up"} }},
		{Name: "slow-b", Run: func(ctx context.Context) Result {
			time.Sleep(300 * time.Millisecond)
			return Result{Status: Pass, Summary: "b"}
		}},
	}
	start := time.Now()
	outs := RunChecks(context.Background(), checks, 500*time.Millisecond)
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %s: checks did not run in parallel or the deadline was not enforced", el)
	}
	want := []struct {
		name   string
		status Status
		sub    string
	}{{"slow-a", Pass, "a"}, {"panics", Fail, "internal error"}, {"hangs", Fail, "did not finish within 500ms"}, {"honours-ctx", Warn, "gave up"}, {"slow-b", Pass, "b"}}
	for i, w := range want {
		if outs[i].Name != w.name || outs[i].Status != w.status || !strings.Contains(outs[i].Summary, w.sub) || outs[i].Details == nil {
			t.Errorf("outcome %d = %+v, want %s %s %q", i, outs[i], w.name, w.status, w.sub)
		}
	}
	if len(outs[1].Details) == 0 || !strings.Contains(outs[1].Details[0], "checks_test.go") {
		t.Errorf("panic details do not locate it: %q", outs[1].Details)
	}
	if Worst(outs) != Fail || Worst(outs[:1]) != Pass {
		t.Errorf("Worst wrong")
	}
}

// reportOutcomes is a fixed report for the golden files.
var reportOutcomes = []Outcome{
	{Name: "env", Status: Pass, Summary: "proxy variables set in both cases, and the cases agree", Details: []string{"HTTP_PROXY=http://gw:3128  http_proxy=http://gw:3128"}},
	{Name: "proxy", Target: "http://alice:xxxxx@squid:3128 (HTTPS_PROXY, https_proxy)", Status: Fail,
		Summary: `the proxy http://alice:xxxxx@squid:3128 rejected the credentials of user "alice" from HTTPS_PROXY, https_proxy: 407 Proxy Authentication Required`,
		Details: []string{"proxy http://alice:xxxxx@squid:3128 answered 407 Proxy Authentication Required to echo.example:8080"},
		Advice:  "Fix the password in HTTPS_PROXY, https_proxy (from its Secret)."},
	{Name: "egress-ip", Target: "http://echo.example:8080/", Status: Warn, Summary: "the proxy and direct egress both leave from 10.0.0.7", Details: []string{}},
}

func TestReportGolden(t *testing.T) {
	var text, textV, js bytes.Buffer
	if err := WriteText(&text, reportOutcomes, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteText(&textV, reportOutcomes, true); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, reportOutcomes); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.text.golden", text.Bytes())
	golden(t, "report.verbose.golden", textV.Bytes())
	golden(t, "report.json.golden", js.Bytes())
	var arr []map[string]any
	if err := json.Unmarshal(js.Bytes(), &arr); err != nil || len(arr) != 3 {
		t.Fatalf("JSON is not an array of 3 checks: %v", err)
	}
	for _, k := range []string{"name", "target", "status", "summary", "details", "advice"} {
		if _, ok := arr[2][k]; !ok {
			t.Errorf("JSON check lacks %q", k)
		}
	}
	var empty bytes.Buffer
	WriteJSON(&empty, nil)
	if strings.TrimSpace(empty.String()) != "[]" {
		t.Errorf("no checks = %q, want []", empty.String())
	}
}

// TestRuntimesEchoCheck: runtimes that would bypass the proxy for an
// outside URL are named with the fix that makes each use it.
func TestRuntimesEchoCheck(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		clients []string
		status  Status
		summary []string
		advice  []string
	}{
		{"all-through-the-proxy", []string{"HTTP_PROXY=http://gw:3128", "http_proxy=http://gw:3128", "NODE_USE_ENV_PROXY=1"}, []string{"go", "curl", "node-http"}, Pass,
			[]string{"go, curl and node-http send echo.example.test:8080 through the proxy (http://gw:3128)"}, nil},
		{"curl-ignores-upper-case", []string{"HTTP_PROXY=http://gw:3128"}, []string{"go", "curl"}, Fail,
			[]string{"curl would go direct, bypassing the proxy"}, []string{"Set both HTTP_PROXY and http_proxy"}},
		{"java-without-properties", []string{"HTTP_PROXY=http://gw:3128", "http_proxy=http://gw:3128"}, []string{"java"}, Fail,
			[]string{"java would go direct"}, []string{"JAVA_TOOL_OPTIONS"}},
		{"node-without-switch", []string{"HTTP_PROXY=http://gw:3128", "http_proxy=http://gw:3128"}, []string{"node-http"}, Fail,
			[]string{"node-http would go direct", "NODE_USE_ENV_PROXY"}, []string{"NODE_USE_ENV_PROXY=1"}},
		{"too-broad-no-proxy", []string{"HTTP_PROXY=http://gw:3128", "http_proxy=http://gw:3128", "NO_PROXY=.test", "no_proxy=.test"}, []string{"go"}, Fail,
			[]string{"go would go direct"}, []string{"Remove or narrow the NO_PROXY entry `.test`"}},
		{"no-proxy-at-all", []string{"PATH=/bin"}, []string{"go"}, Warn, []string{"no proxy variable is set"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := runNamed(t, Options{Echo: "http://echo.example.test:8080/", Clients: tt.clients, Timeout: time.Second}, offline(t, tt.env...), "runtimes")
			got := o[len(o)-1] // the echo URL's comes after the internal ones
			if got.Status != tt.status {
				t.Errorf("status %s, want %s: %s", got.Status, tt.status, got.Summary)
			}
			for _, s := range tt.summary {
				if !strings.Contains(got.Summary, s) {
					t.Errorf("summary %q lacks %q", got.Summary, s)
				}
			}
			for _, s := range tt.advice {
				if !strings.Contains(got.Advice, s) {
					t.Errorf("advice %q lacks %q", got.Advice, s)
				}
			}
		})
	}
}

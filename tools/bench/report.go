package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The tests, in the order they run inside a round.
const (
	testHTTP = "http"
	// testLatency: keep-alive GETs at a fixed rate (latency.go).
	testLatency = "latency"
	testSetup   = "setup"
	testBulk    = "bulk"
	testIdle    = "idle"
	// testIntercept: a new TLS connection per GET to an intercepted host
	// (the client's handshake with the proxy's leaf, the proxy's with the
	// origin); testInterceptKA: keep-alive GETs inside one intercepted TLS
	// connection per client.
	testIntercept   = "intercept"
	testInterceptKA = "intercept-ka"
)

var allTests = []string{testHTTP, testLatency, testSetup, testBulk, testIdle, testIntercept, testInterceptKA}

// interceptTest reports whether test needs a proxy that intercepts TLS.
func interceptTest(test string) bool { return test == testIntercept || test == testInterceptKA }

// Result is one test of one proxy in one round: what was counted, and the
// metrics derived from it (Metrics, filled by derive).
type Result struct {
	Proxy string `json:"proxy"`
	Test  string `json:"test"`
	Round int    `json:"round"`

	Ops        int64   `json:"ops,omitempty"`   // http, setup: operations completed
	Bytes      int64   `json:"bytes,omitempty"` // bulk: body bytes received
	Seconds    float64 `json:"seconds,omitempty"`
	P50ms      float64 `json:"p50_ms,omitempty"`
	P99ms      float64 `json:"p99_ms,omitempty"`
	P999ms     float64 `json:"p999_ms,omitempty"`       // latency
	Offered    float64 `json:"offered_per_s,omitempty"` // latency: the rate requests were scheduled at
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	// CPUSeconds is the proxy process's user+system time during the test;
	// nil when there is no process (direct) or it could not be read.
	CPUSeconds *float64    `json:"cpu_s,omitempty"`
	BaseRSSKiB int64       `json:"base_rss_kib,omitempty"` // idle: before the first tunnel
	Idle       []idleStage `json:"idle,omitempty"`

	Metrics map[string]float64 `json:"metrics"`
}

// Metric names: the keys of Result.Metrics, the JSON summary and the ratios.
const (
	mOps       = "ops_per_s"
	mCPUPerOp  = "cpu_us_per_op"
	mP50       = "p50_ms"
	mP99       = "p99_ms"
	mMBps      = "mb_per_s"
	mCPUPerGiB = "cpu_ms_per_gib"
	mErrors    = "errors"
	mPerTunnel = "rss_kib_per_idle_tunnel"
)

// mRSS and mHeld are the idle test's metrics at n tunnels.
func mRSS(n int) string  { return "rss_kib_" + strconv.Itoa(n) }
func mHeld(n int) string { return "held_" + strconv.Itoa(n) }

// minCPU is the least CPU time a per-operation figure is derived from: the
// kernel counts it in ticks of 10 ms, so below 100 ms the figure would be
// off by up to 10 % (a test too short or too small for its CPU to show).
const minCPU = 100 * time.Millisecond

// derive computes r.Metrics from the counts.
func (r *Result) derive() {
	m := map[string]float64{mErrors: float64(r.Errors)}
	cpu := func() (float64, bool) {
		if r.CPUSeconds == nil || *r.CPUSeconds < minCPU.Seconds() {
			return 0, false
		}
		return *r.CPUSeconds, true
	}
	switch r.Test {
	case testHTTP, testSetup, testIntercept, testInterceptKA:
		if r.Ops > 0 && r.Seconds > 0 {
			m[mOps] = float64(r.Ops) / r.Seconds
			m[mP50], m[mP99] = r.P50ms, r.P99ms
			if c, ok := cpu(); ok {
				m[mCPUPerOp] = c * 1e6 / float64(r.Ops)
			}
		}
	case testLatency:
		if r.Ops > 0 && r.Seconds > 0 {
			m[mOps], m[mOffered] = float64(r.Ops)/r.Seconds, r.Offered
			m[mP50], m[mP99], m[mP999] = r.P50ms, r.P99ms, r.P999ms
			if c, ok := cpu(); ok {
				m[mCPUPerOp] = c * 1e6 / float64(r.Ops)
			}
		}
	case testBulk:
		if r.Bytes > 0 && r.Seconds > 0 {
			m[mMBps] = float64(r.Bytes) / r.Seconds / 1e6
			if c, ok := cpu(); ok {
				m[mCPUPerGiB] = c * 1e3 / (float64(r.Bytes) / (1 << 30))
			}
		}
	case testIdle:
		for _, s := range r.Idle {
			m[mHeld(s.Tunnels)] = float64(s.Held)
			if s.RSSKiB > 0 {
				m[mRSS(s.Tunnels)] = float64(s.RSSKiB)
			}
		}
		if k := len(r.Idle); k >= 2 {
			a, b := r.Idle[0], r.Idle[k-1]
			if a.RSSKiB > 0 && b.RSSKiB > 0 && b.Held > a.Held {
				m[mPerTunnel] = float64(b.RSSKiB-a.RSSKiB) / float64(b.Held-a.Held)
			}
		}
	}
	r.Metrics = m
}

// median of the values; NaN when there are none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// summary is the medians over rounds, by proxy, test and metric.
type summary map[string]map[string]map[string]float64

// summarize takes, for each proxy, test and metric, the median over the
// rounds that have the metric. Errors are summed instead: one failure in
// any round must show.
func summarize(rs []Result) summary {
	vals := map[[3]string][]float64{}
	for _, r := range rs {
		for k, v := range r.Metrics {
			key := [3]string{r.Proxy, r.Test, k}
			vals[key] = append(vals[key], v)
		}
	}
	out := summary{}
	for key, v := range vals {
		p, t, k := key[0], key[1], key[2]
		if out[p] == nil {
			out[p] = map[string]map[string]float64{}
		}
		if out[p][t] == nil {
			out[p][t] = map[string]float64{}
		}
		if k == mErrors {
			var sum float64
			for _, x := range v {
				sum += x
			}
			out[p][t][k] = sum
			continue
		}
		out[p][t][k] = median(v)
	}
	return out
}

// ratioMetric reports whether metric m of test is compared between
// proxies: throughput, CPU and memory, and the latency test's p99 (all
// proxies ran at the same rate). Other latencies and error counts are not
// ratios anyone reads.
func ratioMetric(test, m string) bool {
	if test == testLatency {
		return m == mP99 || m == mCPUPerOp
	}
	switch m {
	case mOps, mCPUPerOp, mMBps, mCPUPerGiB, mPerTunnel:
		return true
	}
	return strings.HasPrefix(m, "rss_kib_")
}

// ratios compares proxy with ref round by round (the two ran minutes apart
// at most, under the same load) and returns, per test and metric, the
// median of those ratios. A metric is compared only in rounds where both
// have it.
func ratios(rs []Result, proxy, ref string) map[string]map[string]float64 {
	type key struct {
		round int
		test  string
	}
	refs := map[key]Result{}
	for _, r := range rs {
		if r.Proxy == ref {
			refs[key{r.Round, r.Test}] = r
		}
	}
	vals := map[[2]string][]float64{}
	for _, r := range rs {
		if r.Proxy != proxy {
			continue
		}
		b, ok := refs[key{r.Round, r.Test}]
		if !ok {
			continue
		}
		for k, v := range r.Metrics {
			if w, ok := b.Metrics[k]; ok && ratioMetric(r.Test, k) && w > 0 {
				vals[[2]string{r.Test, k}] = append(vals[[2]string{r.Test, k}], v/w)
			}
		}
	}
	out := map[string]map[string]float64{}
	for k, v := range vals {
		if out[k[0]] == nil {
			out[k[0]] = map[string]float64{}
		}
		out[k[0]][k[1]] = median(v)
	}
	return out
}

// Report is what -json writes: how the run was made, every round's
// results, the medians and the ratios.
type Report struct {
	Command  string            `json:"command"`
	Revision string            `json:"revision,omitempty"` // git describe of the repository it ran in
	Started  time.Time         `json:"started"`
	Machine  machine           `json:"machine"`
	Settings settings          `json:"settings"`
	Proxies  []proxyInfo       `json:"proxies"`
	LeftOut  map[string]string `json:"left_out,omitempty"`
	Results  []Result          `json:"results"`
	Median   summary           `json:"median"`
	// Ratios: reference proxy -> proxy -> test -> metric -> median of the
	// per-round ratios proxy ÷ reference.
	Ratios map[string]map[string]map[string]map[string]float64 `json:"ratios,omitempty"`
}

type machine struct {
	CPUs        int       `json:"cpus"`
	Kernel      string    `json:"kernel"`
	LoadStart   []float64 `json:"load_avg_start"`
	LoadEnd     []float64 `json:"load_avg_end"`
	FileLimit   uint64    `json:"open_file_limit"`
	GoVersion   string    `json:"go"`
	Description string    `json:"note,omitempty"`
}

type settings struct {
	Tests     []string `json:"tests"`
	Rounds    int      `json:"rounds"`
	Clients   int      `json:"clients"`
	Duration  string   `json:"duration"`
	BulkBytes int64    `json:"bulk_bytes"`
	Idle      []int    `json:"idle"`
	Reference string   `json:"reference,omitempty"`
}

type proxyInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Target  string `json:"target"`        // what the workloads ask this proxy for
	Config  string `json:"config"`        // how it was started
	PID     int    `json:"pid,omitempty"` // the process whose CPU and RSS are read
}

func (rep *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// row is one line of the table: a test's main metric, with its CPU cost
// beside it when there is one.
type row struct {
	test, label string
	main, cpu   string // metric keys; cpu may be ""
	show        func(v float64) string
	showCPU     func(v float64) string
	held        int  // an RSS row: the tunnels asked for (a cell says when fewer were held)
	noErrors    bool // the row does not show the test's error count (it shows on another row)
	ratioNoCPU  bool // the ratio table shows the main metric alone (cpu is not a CPU figure)
}

func (rep *Report) rows() []row {
	var rows []row
	cpuMs := func(v float64) string { return fmt.Sprintf("%.0f ms", v) }
	perTunnel := func(v float64) string { return fmt.Sprintf("%.2f KiB", v) }
	for _, t := range rep.Settings.Tests {
		switch t {
		case testHTTP:
			rows = append(rows, row{test: t, label: "keep-alive HTTP req/s (CPU per request)", main: mOps, cpu: mCPUPerOp, show: thousands, showCPU: micros})
		case testLatency:
			rows = append(rows, row{test: t, label: "keep-alive p99 at 50 % of egret's req/s, ms (p50)", main: mP99, cpu: mP50,
				show: millis, showCPU: func(v float64) string { return "p50 " + millis(v) }, ratioNoCPU: true})
		case testSetup:
			rows = append(rows, row{test: t, label: "new tunnels/s (CPU per tunnel)", main: mOps, cpu: mCPUPerOp, show: thousands, showCPU: micros})
		case testIntercept:
			rows = append(rows, row{test: t, label: "intercepted: new TLS connections/s (CPU per connection)", main: mOps, cpu: mCPUPerOp, show: thousands, showCPU: micros})
		case testInterceptKA:
			rows = append(rows, row{test: t, label: "intercepted: keep-alive HTTPS req/s (CPU per request)", main: mOps, cpu: mCPUPerOp, show: thousands, showCPU: micros})
		case testBulk:
			rows = append(rows, row{test: t, label: sizeString(rep.Settings.BulkBytes) + " through one tunnel, MB/s (CPU per GiB)",
				main: mMBps, cpu: mCPUPerGiB, show: thousands, showCPU: cpuMs})
		case testIdle:
			for i, n := range rep.Settings.Idle {
				rows = append(rows, row{test: t, label: "RSS with " + thousands(float64(n)) + " idle tunnels", main: mRSS(n), show: mib, held: n, noErrors: i > 0})
			}
			if k := len(rep.Settings.Idle); k >= 2 {
				a, b := rep.Settings.Idle[0], rep.Settings.Idle[k-1]
				rows = append(rows, row{test: t, label: fmt.Sprintf("RSS per idle tunnel, %s → %s", thousands(float64(a)), thousands(float64(b))),
					main: mPerTunnel, show: perTunnel, noErrors: true})
			}
		}
	}
	return rows
}

// cell shows the medians m of one proxy's test on row r: "8,866 (77 µs)",
// "39.0 MiB", "—" when the metric is missing.
func (r row) cell(m map[string]float64) string {
	v, ok := m[r.main]
	if !ok {
		return "—"
	}
	s := r.show(v)
	if h, ok := m[mHeld(r.held)]; ok && r.held > 0 && h < float64(r.held) {
		s += " (" + thousands(h) + " held)"
	}
	if c, ok := m[r.cpu]; ok && r.cpu != "" {
		s += " (" + r.showCPU(c) + ")"
	}
	if e := m[mErrors]; e == 1 && !r.noErrors {
		s += " ⚠ 1 error"
	} else if e > 1 && !r.noErrors {
		s += fmt.Sprintf(" ⚠ %.0f errors", e)
	}
	return s
}

// ratio shows the ratios m of one proxy's test on row r: "1.13× (0.82× CPU)".
func (r row) ratio(m map[string]float64) string {
	v, ok := m[r.main]
	if !ok {
		return "—"
	}
	s := fmt.Sprintf("%.2f×", v)
	if c, ok := m[r.cpu]; ok && r.cpu != "" && !r.ratioNoCPU {
		s += fmt.Sprintf(" (%.2f× CPU)", c)
	}
	return s
}

// writeTable prints the medians, then the ratios, as Markdown tables.
func (rep *Report) writeTable(w io.Writer) {
	names := make([]string, len(rep.Proxies))
	for i, p := range rep.Proxies {
		names[i] = p.Name
	}
	fmt.Fprintf(w, "%s\n\n", rep.Command)
	if rep.Revision != "" {
		fmt.Fprintf(w, "egret repository at %s\n", rep.Revision)
	}
	fmt.Fprintf(w, "%s; %d round(s), medians; %d CPU(s), load average %s at the start, %s at the end\n\n",
		rep.Started.Format("2006-01-02 15:04 MST"), rep.Settings.Rounds, rep.Machine.CPUs,
		loadString(rep.Machine.LoadStart), loadString(rep.Machine.LoadEnd))
	fmt.Fprintf(w, "| test | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---:|", len(names)))
	for _, r := range rep.rows() {
		cells := make([]string, len(names))
		for i, p := range names {
			m := rep.Median[p][r.test]
			if m == nil {
				cells[i] = "—"
				continue
			}
			cells[i] = r.cell(m)
		}
		fmt.Fprintf(w, "| %s | %s |\n", r.label, strings.Join(cells, " | "))
	}
	refs := sortedKeys(rep.Ratios)
	slices.SortStableFunc(refs, func(a, b string) int { // the reference first
		return cmpBool(b == rep.Settings.Reference, a == rep.Settings.Reference)
	})
	for _, ref := range refs {
		byProxy := rep.Ratios[ref]
		var cols []string
		for _, p := range names {
			if _, ok := byProxy[p]; ok {
				cols = append(cols, p)
			}
		}
		if len(cols) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n÷ %s (medians of the ratios within each round):\n\n", ref)
		fmt.Fprintf(w, "| test | %s |\n|---|%s\n", strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
		for _, r := range rep.rows() {
			cells := make([]string, len(cols))
			for i, p := range cols {
				cells[i] = "—"
				if m := byProxy[p][r.test]; m != nil {
					cells[i] = r.ratio(m)
				}
			}
			fmt.Fprintf(w, "| %s | %s |\n", r.label, strings.Join(cells, " | "))
		}
	}
	fmt.Fprintln(w)
	for _, p := range rep.Proxies {
		v := p.Version
		if v != "" {
			v += "; "
		}
		fmt.Fprintf(w, "%s: %s%s\n", p.Name, v, p.Config)
	}
	for _, name := range sortedKeys(rep.LeftOut) {
		fmt.Fprintf(w, "left out: %s: %s\n", name, rep.LeftOut[name])
	}
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

// thousands formats v rounded to an integer with a comma between groups
// of three digits: 8866.4 → "8,866".
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func micros(v float64) string { return fmt.Sprintf("%.0f µs", v) }

// millis shows milliseconds: two decimals below 10 ms.
func millis(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// mib shows KiB as MiB: one decimal below 100 MiB.
func mib(kib float64) string {
	v := kib / 1024
	if v < 100 {
		return fmt.Sprintf("%.1f MiB", v)
	}
	return fmt.Sprintf("%.0f MiB", v)
}

func loadString(l []float64) string {
	if len(l) == 0 {
		return "unknown"
	}
	s := make([]string, len(l))
	for i, v := range l {
		s[i] = strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strings.Join(s, " ")
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var discardLog = log.New(io.Discard, "", 0)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

// options are the flags.
type options struct {
	proxies       []string
	tests         []string
	rounds        int
	clients       int
	duration      time.Duration
	bulk          int64
	idle          []int
	idleTimeout   time.Duration
	ref           string
	egret         string
	gatewayConfig string
	minproxy      string
	interceptd    string
	squidOpenSSL  string
	smokescreen   string
	atsConfig     string
	origin        string
	jsonOut       string
	require       bool
	keep          bool
	latencyRate   float64
}

// rawFlags are the flags parsed further after flag.Parse.
type rawFlags struct {
	proxies, tests, bulk, idle string
}

// newFlags defines the flags, into o and raw.
func newFlags(o *options, raw *rawFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&raw.proxies, "proxies", defaultPeers, "comma-separated proxies to measure, in the table's order")
	fs.StringVar(&raw.tests, "tests", strings.Join(allTests, ","), "comma-separated tests: http, latency, setup, bulk, idle, intercept, intercept-ka")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; the proxies take turns inside each, the table shows medians")
	fs.IntVar(&o.clients, "c", 16, "concurrent clients of the http and setup tests")
	fs.DurationVar(&o.duration, "d", 3*time.Second, "duration of the http, setup and latency tests")
	fs.Float64Var(&o.latencyRate, "latency-rate", 0, "requests per second of the latency test (0: half of egret's keep-alive req/s in the same round's http test)")
	fs.StringVar(&raw.bulk, "bulk", "1GiB", "bytes through one tunnel in the bulk test (suffixes KiB, MiB, GiB)")
	fs.StringVar(&raw.idle, "idle", "5000,20000", "comma-separated counts of idle tunnels, ascending; RSS at each, and per tunnel from the first to the last")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", time.Minute, "longest the idle test spends opening the tunnels of one count")
	fs.StringVar(&o.ref, "ref", pTrafficSrv, "the proxy the others are compared with (\"\" for none)")
	fs.StringVar(&o.egret, "egret", "bin/egret", "the egret binary (make build)")
	fs.StringVar(&o.gatewayConfig, "gateway-config", "scripts/bench-gateway.yaml", "egret-gateway's configuration file")
	fs.StringVar(&o.minproxy, "minproxy", "", "the minproxy binary (default: go build egret.io/egret/tools/bench/minproxy)")
	fs.StringVar(&o.interceptd, "interceptd", "", "the interceptd binary (default: go build egret.io/egret/tools/bench/interceptd)")
	fs.StringVar(&o.squidOpenSSL, "squid-openssl", defaultSquidOpenSSL(), "Squid built with OpenSSL (ssl-bump), as scripts/bench-deps.sh unpacks Debian's squid-openssl")
	smokescreen, _ := execPath("smokescreen")
	fs.StringVar(&o.smokescreen, "smokescreen", smokescreen, "the Smokescreen binary (scripts/bench-deps.sh prints its path)")
	fs.StringVar(&o.atsConfig, "ats-config", "/etc/trafficserver", "Traffic Server's packaged configuration, copied and adapted")
	fs.StringVar(&o.origin, "origin", "127.0.0.2:0", "address of the origin server: the address -gateway-config answers "+gatewayOriginHost+" with, and not 127.0.0.1, which the gateway's SSRF guard refuses as its own")
	fs.StringVar(&o.jsonOut, "json", "", "also write every result and the summary to this file as JSON")
	fs.BoolVar(&o.require, "require", false, "fail when a proxy cannot be measured instead of leaving it out")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (configurations and logs of the proxies)")
	return fs
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var (
		o   options
		raw rawFlags
	)
	fs := newFlags(&o, &raw)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.proxies = splitList(raw.proxies)
	o.tests = splitList(raw.tests)
	for _, t := range o.tests {
		if !slices.Contains(allTests, t) {
			return o, fmt.Errorf("-tests: unknown test %q (the tests: %s)", t, strings.Join(allTests, ", "))
		}
	}
	for i, p := range o.proxies {
		if !slices.Contains(splitList(defaultPeers), p) {
			return o, fmt.Errorf("-proxies: unknown proxy %q (the proxies: %s)", p, defaultPeers)
		}
		if slices.Contains(o.proxies[:i], p) {
			return o, fmt.Errorf("-proxies: %q twice", p)
		}
	}
	if len(o.proxies) == 0 || len(o.tests) == 0 {
		return o, errors.New("-proxies and -tests must each name at least one")
	}
	if o.rounds < 1 || o.clients < 1 || o.duration <= 0 {
		return o, errors.New("-rounds, -c and -d must be positive")
	}
	var err error
	for _, path := range []*string{&o.egret, &o.gatewayConfig, &o.minproxy, &o.interceptd, &o.squidOpenSSL, &o.smokescreen, &o.atsConfig} {
		if *path != "" {
			if *path, err = filepath.Abs(*path); err != nil {
				return o, err
			}
		}
	}
	if o.bulk, err = parseSize(raw.bulk); err != nil || o.bulk <= 0 {
		return o, fmt.Errorf("-bulk %q: want a positive size such as 1GiB or 64MiB", raw.bulk)
	}
	if o.idle, err = parseCounts(raw.idle); err != nil {
		return o, fmt.Errorf("-idle: %w", err)
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseSize reads a byte count with an optional binary suffix: 1GiB, 64MiB,
// 512KiB, 4096.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, err
	}
	if n > (1<<62)/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

// sizeString is the inverse of parseSize for the table: "1 GiB", "64 MiB".
func sizeString(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// parseCounts reads "5000,20000": positive, strictly ascending.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: want a positive count of tunnels", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("%q: counts must ascend", s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("want at least one count")
	}
	return out, nil
}

// fdsPerIdleTunnel is what one idle tunnel takes from the open-file limit,
// both in a proxy (client and origin side) and in this harness (the client
// and the in-process origin); fdsReserve is left for everything else.
const (
	fdsPerIdleTunnel = 2
	fdsReserve       = 1024
)

// fitIdle lowers the idle counts to what an open-file limit allows, and
// says so; it returns the counts unchanged when they fit.
func fitIdle(counts []int, limit uint64) ([]int, string) {
	most := (int(min(limit, 1<<30)) - fdsReserve) / fdsPerIdleTunnel
	most -= most % 100
	if counts[len(counts)-1] <= most {
		return counts, ""
	}
	var out []int
	for _, n := range counts {
		n = min(n, most)
		if n > 0 && (len(out) == 0 || n > out[len(out)-1]) {
			out = append(out, n)
		}
	}
	want := counts[len(counts)-1]
	return out, fmt.Sprintf("idle: the open-file limit is %d (ulimit -Hn); %s idle tunnels need %s descriptors in the proxy and in this harness; measuring %s instead (raising the hard limit needs CAP_SYS_RESOURCE)",
		limit, thousands(float64(want)), thousands(float64(want*fdsPerIdleTunnel+fdsReserve)), joinInts(out))
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func execPath(name string) (string, error) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, name)
		if executable(p, "") == nil {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}

// runner holds one run: the options, the work directory, the origin and
// the proxies it started.
type runner struct {
	opt    options
	dir    string
	origin *origin
	peers  []*peer
	tls    *tlsLab // the intercept tests' CAs, TLS origin and client settings; nil without them
	// saturation is egret's keep-alive req/s in the latest http test: the
	// latency test offers half of it (latencyRate).
	saturation float64
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opt, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	rep := &Report{
		Command: "go run ./tools/bench " + quoteArgs(args),
		Started: time.Now().UTC().Truncate(time.Second),
		LeftOut: map[string]string{},
		Ratios:  map[string]map[string]map[string]map[string]float64{},
	}
	limit, err := raiseFileLimit()
	if err != nil {
		return fmt.Errorf("open-file limit: %w", err)
	}
	if slices.Contains(opt.tests, testIdle) {
		var warn string
		if opt.idle, warn = fitIdle(opt.idle, limit); warn != "" {
			fmt.Fprintln(stderr, "bench:", warn)
			rep.Machine.Description = warn
		}
		if len(opt.idle) == 0 {
			return fmt.Errorf("idle: the open-file limit %d leaves no room for idle tunnels (raise ulimit -n, or leave idle out of -tests)", limit)
		}
	}
	rep.Machine.CPUs, rep.Machine.FileLimit, rep.Machine.GoVersion = runtime.NumCPU(), limit, runtime.Version()
	rep.Machine.Kernel = strings.TrimSpace(readString("/proc/sys/kernel/osrelease"))
	rep.Revision = gitRevision()
	rep.Machine.LoadStart = loadAvg()
	rep.Settings = settings{Tests: opt.tests, Rounds: opt.rounds, Clients: opt.clients, Duration: opt.duration.String(),
		BulkBytes: opt.bulk, Idle: opt.idle, Reference: opt.ref}

	r := &runner{opt: opt}
	if r.dir, err = os.MkdirTemp("", "egret-bench-"); err != nil {
		return err
	}
	os.Chmod(r.dir, 0o777)
	defer func() {
		for _, p := range r.peers {
			p.stop()
		}
		if opt.keep {
			fmt.Fprintln(stderr, "bench: configurations and logs are in", r.dir)
		} else {
			os.RemoveAll(r.dir)
		}
	}()
	if r.origin, err = startOrigin(opt.origin); err != nil {
		return fmt.Errorf("%w (-origin sets the address)", err)
	}
	defer r.origin.Close()
	if slices.ContainsFunc(opt.tests, interceptTest) {
		if r.tls, err = newTLSLab(r.dir, opt.origin); err != nil {
			return err
		}
		defer r.tls.origin.Close()
	}

	var peers []*peer
	for _, name := range opt.proxies {
		p, err := r.startPeer(ctx, name)
		if err != nil {
			if opt.require || ctx.Err() != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			fmt.Fprintf(stderr, "bench: %s left out: %v\n", name, err)
			rep.LeftOut[name] = firstLine(err.Error())
			continue
		}
		peers = append(peers, p)
		rep.Proxies = append(rep.Proxies, p.proxyInfo)
	}
	if len(peers) == 0 {
		return errors.New("no proxy to measure")
	}

	for round := 1; round <= opt.rounds; round++ {
		for _, test := range opt.tests {
			for _, p := range peers {
				if test == testIdle && p.PID == 0 {
					continue // direct: no process to read
				}
				if !p.runs(test) {
					continue
				}
				res := r.measure(ctx, p, test)
				res.Round = round
				res.derive()
				if test == testHTTP && p.Name == pEgret {
					r.saturation = res.Metrics[mOps] // the latency test's rate derives from it
				}
				rep.Results = append(rep.Results, res)
				fmt.Fprintf(stderr, "bench: round %d/%d %-6s %-14s %s\n", round, opt.rounds, test, p.Name, progress(res))
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	rep.Machine.LoadEnd = loadAvg()
	rep.Median = summarize(rep.Results)
	if opt.ref != "" && slices.ContainsFunc(peers, func(p *peer) bool { return p.Name == opt.ref }) {
		rep.addRatios(opt.ref)
	} else if opt.ref != "" {
		fmt.Fprintf(stderr, "bench: no ratios: the reference %s was not measured\n", opt.ref)
	}
	if opt.ref != pEgret && slices.ContainsFunc(peers, func(p *peer) bool { return p.Name == pEgret }) &&
		slices.ContainsFunc(peers, func(p *peer) bool { return p.Name == pGateway }) {
		rep.Ratios[pEgret] = map[string]map[string]map[string]float64{pGateway: ratios(rep.Results, pGateway, pEgret)}
	}
	rep.writeTable(stdout)
	if opt.jsonOut != "" {
		f, err := os.Create(opt.jsonOut)
		if err != nil {
			return err
		}
		if err := rep.writeJSON(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "bench: wrote", opt.jsonOut)
	}
	return nil
}

// addRatios compares every other proxy with ref.
func (rep *Report) addRatios(ref string) {
	m := map[string]map[string]map[string]float64{}
	for _, p := range rep.Proxies {
		if p.Name != ref {
			m[p.Name] = ratios(rep.Results, p.Name, ref)
		}
	}
	rep.Ratios[ref] = m
}

// measure runs one test through p, reading p's CPU time around it.
func (r *runner) measure(ctx context.Context, p *peer, test string) Result {
	if p.exited() {
		return Result{Proxy: p.Name, Test: test, Errors: 1, FirstError: "the proxy has exited; " + tail(p.log)}
	}
	var before time.Duration
	cpuErr := errors.New("no process")
	if p.PID > 0 {
		before, cpuErr = p.cpu()
	}
	var res Result
	t := p.target()
	switch test {
	case testHTTP:
		res = runHTTP(ctx, t, r.opt.clients, r.opt.duration)
	case testLatency:
		res = runLatency(ctx, t, r.opt.clients, r.latencyRate(r.saturation), r.opt.duration)
	case testSetup:
		res = runSetup(ctx, t, r.opt.clients, r.opt.duration)
	case testBulk:
		res = runBulk(ctx, t, r.opt.bulk)
	case testIdle:
		res = runIdle(ctx, t, r.opt.idle, func() (int64, error) { return rssKiB(p.PID) }, r.opt.idleTimeout)
		time.Sleep(idleSettle) // the proxy closes the tunnels before the next one is measured
	case testIntercept:
		res = runInterceptSetup(ctx, r.tls.target(p), r.tls.clientConfig(p), r.opt.clients, r.opt.duration)
	case testInterceptKA:
		res = runInterceptKA(ctx, r.tls.target(p), r.tls.clientConfig(p), r.opt.clients, r.opt.duration)
	}
	if cpuErr == nil {
		if after, err := p.cpu(); err == nil {
			s := (after - before).Seconds()
			res.CPUSeconds = &s
		}
	}
	res.Proxy, res.Test = p.Name, test
	return res
}

// progress is one round's result in a few words, for stderr.
func progress(r Result) string {
	var s string
	switch m := r.Metrics; r.Test {
	case testLatency:
		s = fmt.Sprintf("p99 %.2f ms, p50 %.2f ms at %s/s offered (%s/s done)", m[mP99], m[mP50], thousands(m[mOffered]), thousands(m[mOps]))
		if v, ok := m[mCPUPerOp]; ok {
			s += ", " + micros(v) + " CPU each"
		}
	case testHTTP, testSetup, testIntercept, testInterceptKA:
		s = thousands(m[mOps]) + "/s"
		if v, ok := m[mCPUPerOp]; ok {
			s += ", " + micros(v) + " CPU each"
		}
	case testBulk:
		s = thousands(m[mMBps]) + " MB/s"
		if v, ok := m[mCPUPerGiB]; ok {
			s += fmt.Sprintf(", %.0f ms CPU per GiB", v)
		}
	case testIdle:
		var parts []string
		for _, st := range r.Idle {
			parts = append(parts, fmt.Sprintf("%s held: %s", thousands(float64(st.Held)), mib(float64(st.RSSKiB))))
		}
		s = strings.Join(parts, ", ")
	}
	if r.Errors > 0 {
		s += fmt.Sprintf(" — %d errors, the first: %s", r.Errors, r.FirstError)
	}
	return s
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$\\*?") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// gitRevision names the commit of the repository the harness runs in, with
// "-dirty" when the work tree has changes ("" outside a repository).
func gitRevision() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() []float64 {
	f := strings.Fields(readString("/proc/loadavg"))
	var out []float64
	for i := 0; i < 3 && i < len(f); i++ {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

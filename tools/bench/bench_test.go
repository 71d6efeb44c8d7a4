package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestParseStat(t *testing.T) {
	tail := " S 1 4867 27497 0 -1 4194560 5265 0 0 0 612 345 7 8 20 0 8 0 899880 316708864 8338 18446744073709551615\n"
	for _, tc := range []struct {
		name, in string
		want     int64
		err      string
	}{
		{"plain", "4877 (squid)" + tail, 957, ""},
		{"name-with-spaces-and-parens", "4877 ([TS_MAIN] (x) y)" + tail, 957, ""},
		{"name-looks-like-fields", "4877 (a) S 1 2 3 4 5 6 7 8 9 10 11 12)" + tail, 957, ""},
		{"no-name", "4877 squid S 1", 0, "no command name"},
		{"short", "4877 (squid) S 1 2 3", 0, "fields after the command name"},
		{"bad-utime", "4877 (squid) S 1 4867 27497 0 -1 4194560 5265 0 0 0 x 345 7 8", 0, "utime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseStat = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestCPUTimeTracksWork reads this process's own counters: they must grow by
// the CPU time a busy loop spends (and not, say, by page faults).
func TestCPUTimeTracksWork(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(30 * time.Second)
	x := 0
	for {
		for i := 0; i < 1e6; i++ {
			x += i
		}
		now, err := cpuTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now-before >= 200*time.Millisecond {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("30 s of a busy loop counted as %v of CPU", now-before)
		}
	}
	runtime.KeepAlive(x)
	if _, err := cpuTime(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

func TestParseRSS(t *testing.T) {
	status := "Name:\tegret\nUmask:\t0022\nVmPeak:\t  379324 kB\nVmRSS:\t   33212 kB\nRssAnon:\t   18244 kB\n"
	if got, err := parseRSS([]byte(status)); err != nil || got != 33212 {
		t.Errorf("parseRSS = %d, %v; want 33212", got, err)
	}
	for in, want := range map[string]string{
		"Name:\tkthreadd\nState:\tS\n":    "no VmRSS line",
		"VmRSS:\t   33212 MB\n":           "want \"N kB\"",
		"VmRSS:\n":                        "want \"N kB\"",
		"Name:\tx\nVmRSS:\t  12x kB\nfoo": "invalid syntax",
	} {
		if _, err := parseRSS([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseRSS(%q): error %v, want one containing %q", in, err, want)
		}
	}
}

// TestRSSTracksMemory: touching 64 MiB of fresh anonymous memory must show
// in this process's RSS (mapped here, not from Go's heap, which may hand
// back pages that are resident already).
func TestRSSTracksMemory(t *testing.T) {
	before, err := rssKiB(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	b, err := syscall.Mmap(-1, 0, 64<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(b)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	after, err := rssKiB(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 60<<10 {
		t.Errorf("RSS went from %d to %d KiB after touching 64 MiB", before, after)
	}
}

// FuzzParseStat: whatever the command name holds, the CPU time is the two
// fields after it that the kernel put there.
func FuzzParseStat(f *testing.F) {
	f.Add("squid", uint32(612), uint32(345))
	f.Add("[TS_MAIN]", uint32(0), uint32(1))
	f.Add("a) S 1 2 (b", uint32(1<<31), uint32(7))
	f.Add("x\n) 9 9 9 9 9 9 9 9 9 9 9 9 9", uint32(3), uint32(4))
	f.Fuzz(func(t *testing.T, comm string, utime, stime uint32) {
		line := fmt.Sprintf("4877 (%s) S 1 4867 27497 0 -1 4194560 5265 0 0 0 %d %d 7 8 20 0 8 0 899880 316708864 8338\n", comm, utime, stime)
		got, err := parseStat([]byte(line))
		if err != nil || got != int64(utime)+int64(stime) {
			t.Fatalf("parseStat(%q) = %d, %v; want %d", line, got, err, int64(utime)+int64(stime))
		}
		parseStat([]byte(comm)) // anything at all: an error, never a panic
	})
}

// FuzzParseRSS: any status text gives a value or an error, and a VmRSS line
// in kB among other lines is read as it is.
func FuzzParseRSS(f *testing.F) {
	f.Add("Name:\tegret\nVmPeak:\t 1 kB\n", uint32(33212))
	f.Add("", uint32(0))
	f.Add("VmRSS:\t12 MB\n", uint32(1))
	f.Fuzz(func(t *testing.T, other string, kib uint32) {
		parseRSS([]byte(other))
		if strings.Contains(other, "VmRSS:") {
			return
		}
		text := strings.ReplaceAll(other, "\n", " ") + "\nVmRSS:\t " + strconv.FormatUint(uint64(kib), 10) + " kB\nRssAnon:\t 1 kB\n"
		if got, err := parseRSS([]byte(text)); err != nil || got != int64(kib) {
			t.Fatalf("parseRSS(%q) = %d, %v; want %d", text, got, err, kib)
		}
	})
}

func TestCountOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var clients, servers []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		defer s.Close()
		clients, servers = append(clients, c), append(servers, s)
	}
	if n := countOpen(clients); n != 3 {
		t.Fatalf("%d of 3 open connections counted open", n)
	}
	servers[1].Close()
	servers[2].Write([]byte("x")) // data waiting is not a close
	deadline := time.Now().Add(5 * time.Second)
	for countOpen(clients) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d counted open after the other side closed one of 3", countOpen(clients))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProbeRefuses: a proxy that answers 403 is reported before it is
// measured, with its answer.
func TestProbeRefuses(t *testing.T) {
	o, err := startOrigin("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "denied", http.StatusForbidden)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	r := &runner{origin: o}
	p := &peer{proxyInfo: proxyInfo{Name: "refuser", Target: o.Addr}, URL: "http://" + ln.Addr().String()}
	if err := r.probe(p); err == nil || !strings.Contains(err.Error(), "403 Forbidden") {
		t.Errorf("probe: %v, want the 403", err)
	}
	direct := &peer{proxyInfo: proxyInfo{Name: pDirect, Target: o.Addr}}
	if err := r.probe(direct); err != nil {
		t.Errorf("probe of the origin itself: %v", err)
	}
}

// TestWorkloadsCountFailures: the workloads count what a refusing proxy
// does as errors, never as operations.
func TestWorkloadsCountFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	tg := target{Proxy: "http://" + ln.Addr().String(), Host: "127.0.0.2:9"}
	ctx := context.Background()
	for _, r := range []Result{runHTTP(ctx, tg, 2, 100*time.Millisecond), runSetup(ctx, tg, 2, 100*time.Millisecond),
		runBulk(ctx, tg, 1<<20), runIdle(ctx, tg, []int{5}, nil, time.Second)} {
		if r.Ops != 0 || r.Bytes != 0 || r.Errors == 0 || !strings.Contains(r.FirstError, "503") {
			t.Errorf("%+v: want errors with the 503 and nothing done", r)
		}
		for _, s := range r.Idle {
			if s.Held != 0 {
				t.Errorf("idle: %d tunnels held through a proxy that refuses them", s.Held)
			}
		}
	}
}

// TestSmoke runs the harness as `make bench-compare` does, with tiny sizes,
// against egret (both configurations), minproxy and the origin directly:
// every proxy starts, every workload gets through it without an error, the
// CPU and memory of each process are read, the gateway routes by its
// rules, and the JSON and the table say so.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts egret and minproxy")
	}
	egret := testutil.BuildEgret(t)
	out := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	args := []string{"-proxies", "egret,egret-gateway,minproxy,direct", "-tests", "http,setup,bulk,idle", "-egret", egret,
		"-gateway-config", "../../scripts/bench-gateway.yaml", "-require", "-ref", "minproxy",
		"-rounds", "1", "-c", "4", "-d", "300ms", "-bulk", "16MiB", "-idle", "50,150", "-json", out, "-keep"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, args, &stdout, io.MultiWriter(&stderr, testWriter{t})); err != nil {
		t.Fatalf("run: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Proxies) != 4 || len(rep.LeftOut) != 0 {
		t.Fatalf("proxies %v, left out %v", rep.Proxies, rep.LeftOut)
	}
	if want := 4*3 + 3; len(rep.Results) != want {
		t.Errorf("%d results, want %d (4 proxies, 3 tests, idle without direct)", len(rep.Results), want)
	}
	for _, r := range rep.Results {
		if r.Errors != 0 {
			t.Errorf("%s/%s round %d: %d errors, the first: %s", r.Proxy, r.Test, r.Round, r.Errors, r.FirstError)
		}
		proxied := r.Proxy != pDirect
		if proxied != (r.CPUSeconds != nil) {
			t.Errorf("%s/%s: CPU %v", r.Proxy, r.Test, r.CPUSeconds)
		}
		switch r.Test {
		case testHTTP, testSetup:
			// 300 ms of 4 clients through a proxy keeps it busy for more than a tick.
			if r.Ops == 0 || (proxied && *r.CPUSeconds <= 0) {
				t.Errorf("%s/%s: %d operations, CPU %v s", r.Proxy, r.Test, r.Ops, r.CPUSeconds)
			}
		case testBulk:
			if r.Bytes != 16<<20 {
				t.Errorf("%s/bulk: %d bytes", r.Proxy, r.Bytes)
			}
		case testIdle:
			if len(r.Idle) != 2 || r.Idle[0].Held != 50 || r.Idle[1].Held != 150 || r.Idle[0].RSSKiB <= 0 ||
				r.Idle[1].RSSKiB <= 0 {
				t.Errorf("%s/idle: %+v", r.Proxy, r.Idle)
			}
			if _, ok := r.Metrics[mPerTunnel]; !ok && r.Idle[1].RSSKiB > r.Idle[0].RSSKiB {
				t.Errorf("%s/idle: no figure per tunnel in %v", r.Proxy, r.Metrics)
			}
		}
	}
	for _, p := range []string{pEgret, pGateway} {
		if m := rep.Ratios[pMinproxy][p][testHTTP]; m[mOps] <= 0 {
			t.Errorf("no ratio of %s to minproxy: %v", p, rep.Ratios[pMinproxy][p])
		}
	}
	if m := rep.Ratios[pEgret][pGateway][testSetup]; m[mOps] <= 0 {
		t.Errorf("no ratio of the gateway to plain egret: %v", rep.Ratios[pEgret])
	}
	if rep.Proxies[1].Target != net.JoinHostPort(gatewayOriginHost, portOf(rep.Proxies[0].Target)) {
		t.Errorf("the gateway was asked for %s, not the origin by name", rep.Proxies[1].Target)
	}
	// The gateway walked its rules down to the one that lets the origin in.
	_, dir, ok := strings.Cut(stderr.String(), "configurations and logs are in ")
	if !ok {
		t.Fatalf("no work directory in\n%s", stderr.String())
	}
	dir = strings.TrimSpace(dir)
	defer os.RemoveAll(dir)
	glog, err := os.ReadFile(filepath.Join(dir, pGateway, pGateway+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(glog), `(config route \"bench-origin\")`); n < 100 {
		t.Errorf("%d requests and tunnels routed by the bench-origin rule in the gateway's log:\n%.2000s", n, glog)
	}
	table := stdout.String()
	for _, want := range []string{"go run ./tools/bench -proxies egret,egret-gateway,minproxy,direct", "| test | egret | egret-gateway | minproxy | direct |",
		"| new tunnels/s (CPU per tunnel) |", "| RSS per idle tunnel, 50 → 150 |", "÷ minproxy", "÷ egret", "egret-gateway: egret "} {
		if !strings.Contains(table, want) {
			t.Errorf("the table has no %q:\n%s", want, table)
		}
	}
}

// TestSmokeIntercept runs the intercept tests, tiny, through interceptd,
// through `egret proxy --role gateway` with an intercept site, and
// directly: full handshakes and keep-alive requests, no error, and every
// request intercepted (the access logs name the injected credential).
func TestSmokeIntercept(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts interceptd")
	}
	egret := testutil.BuildEgret(t)
	var stdout, stderr bytes.Buffer
	args := []string{"-proxies", "egret-intercept,egret-gw-intercept,direct", "-tests", "intercept,intercept-ka", "-require", "-ref", "",
		"-egret", egret, "-rounds", "1", "-c", "4", "-d", "500ms", "-keep"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, args, &stdout, io.MultiWriter(&stderr, testWriter{t})); err != nil {
		t.Fatalf("run: %v", err)
	}
	_, dir, ok := strings.Cut(stderr.String(), "configurations and logs are in ")
	if !ok {
		t.Fatalf("no work directory in\n%s", stderr.String())
	}
	dir = strings.TrimSpace(dir)
	defer os.RemoveAll(dir)
	table := stdout.String()
	for _, want := range []string{"| test | egret-intercept | egret-gw-intercept | direct |", "| intercepted: new TLS connections/s (CPU per connection) |",
		"| intercepted: keep-alive HTTPS req/s (CPU per request) |"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table has no %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "error") {
		t.Errorf("errors:\n%s", table)
	}
	log, err := os.ReadFile(filepath.Join(dir, pIntercept, "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), `"credentials":["bench/token"]`); n < 50 {
		t.Errorf("%d intercepted requests with the credential in the access log:\n%.1000s", n, log)
	}
	if strings.Contains(string(log), "bench-injected-token") {
		t.Error("the access log holds the injected token")
	}
	gw, err := os.ReadFile(filepath.Join(dir, pGwIntercept, pGwIntercept+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(gw), `"credentials":["bench/token"]`); n < 50 {
		t.Errorf("%d intercepted requests with the credential in the gateway's log:\n%.1000s", n, gw)
	}
	if strings.Contains(string(gw), "bench-injected-token") {
		t.Error("the gateway's log holds the injected token")
	}
}

func portOf(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

// testWriter logs the harness's progress lines with the test's output.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

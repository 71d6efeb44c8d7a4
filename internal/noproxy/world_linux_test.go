//go:build linux

package noproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
)

// A world is the place where the differential tests run the real clients:
// a network namespace with only loopback, in which
//   - every host name of the cases resolves (through the namespace's own
//     /etc/hosts) to an address of its own on lo, and every IP literal of
//     the cases is an address on lo;
//   - an origin listens on every port the case URLs use, on all of them;
//   - a recording proxy listens on 127.0.0.1:9 (the lower-case variables'
//     proxy) and one on 127.0.0.1:8 (the upper-case ones').
//
// A client's decision is what the listeners saw, not what it says: a
// connection to the origin is "D", one to a proxy "P:<port>", none at all
// "E" (the client failed before connecting). Cases run one at a time and
// in lock step (see run), so every connection belongs to one case.
type world struct {
	t     *testing.T
	ns    *netns.NS
	hosts map[string]netip.Addr // host name → its address in the namespace

	mu        sync.Mutex
	seen      []sighting
	listeners []*recorder
	dials     chan dialReq

	cases []diffCase // what it was built for (lanes are built alike)
	lanes []*world   // more worlds for processes run side by side; lanes[0] is w
}

// sighting is one connection a listener accepted.
type sighting struct {
	proxy bool   // a proxy listener (else the origin)
	port  int    // the listener's port
	local string // the address the client connected to
	what  string // the request line, or "TLS" with the SNI
}

type recorder struct {
	ln       net.Listener
	addr     string // the listener's address, to dial for the barrier
	proxy    bool
	port     int
	sentinel chan struct{}
}

type dialReq struct {
	from, to string
	done     chan error
}

// Sentinel sources: barrier connections come from these addresses, so the
// listeners tell them from the clients' connections.
const (
	sentinel4 = "127.0.0.99"
	sentinel6 = "2001:db8:e9:ffff::99"
	// Host names resolve to 2001:db8:e9::<n>: a documentation prefix no
	// NO_PROXY entry of the cases covers, and IPv6, so Ruby (which matches
	// IP entries against the resolved address of a name) sees no match.
	namePrefix = "2001:db8:e9::"
)

var diffProxyPorts = []int{8, 9}

// newWorld builds the namespace for cases.
func newWorld(t *testing.T, cases []diffCase) *world {
	t.Helper()
	netns.Require(t)
	w := &world{t: t, ns: netns.New(t, "noproxy"), hosts: map[string]netip.Addr{}, dials: make(chan dialReq), cases: cases}
	names, ips, ports := caseHosts(cases)
	addrs := []string{sentinel4 + "/32", sentinel6 + "/128"}
	for _, ip := range ips {
		if ip.IsLoopback() {
			continue
		}
		bits := 32
		if ip.Is6() {
			bits = 128
		}
		addrs = append(addrs, netip.PrefixFrom(ip, bits).String())
	}
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	for i, n := range names {
		a := netip.MustParseAddr(namePrefix + strconv.FormatInt(int64(i+1), 16))
		w.hosts[n] = a
		addrs = append(addrs, a.String()+"/128")
		fmt.Fprintf(&hosts, "%s %s\n", a, n)
	}
	for _, a := range addrs {
		args := []string{"ip", "addr", "add", a, "dev", "lo"}
		if strings.Contains(a, ":") {
			args = append(args, "nodad")
		}
		w.ns.Run(t, args...)
	}
	w.ns.WriteEtc(t, "hosts", hosts.String())
	// No DNS server: a name missing from hosts fails at once.
	w.ns.WriteEtc(t, "resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

	for _, p := range ports {
		w.listen(t, net.JoinHostPort("::", strconv.Itoa(p)), net.JoinHostPort("::1", strconv.Itoa(p)), false, p)
	}
	for _, p := range diffProxyPorts {
		a := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		w.listen(t, a, a, true, p)
	}
	go w.ns.Do(func() error {
		for r := range w.dials {
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(r.from)}}
			c, err := d.Dial("tcp", r.to)
			if err == nil {
				c.Close()
			}
			r.done <- err
		}
		return nil
	})
	t.Cleanup(func() { close(w.dials) })
	return w
}

// caseHosts lists the host names, the IP literals and the ports of the
// case URLs. A name with a trailing dot is listed both ways; a non-ASCII
// name also in punycode.
func caseHosts(cases []diffCase) (names []string, ips []netip.Addr, ports []int) {
	nameSet, ipSet, portSet := map[string]bool{}, map[netip.Addr]bool{}, map[int]bool{}
	for _, c := range cases {
		t, err := parseTarget(c.URL)
		if err != nil {
			continue
		}
		portSet[int(t.port)] = true
		if t.ip.IsValid() {
			ipSet[t.ip.Unmap()] = true
			continue
		}
		for _, n := range []string{lower(t.host), t.hostname} {
			if n == "localhost" {
				continue
			}
			nameSet[n] = true
			nameSet[strings.TrimSuffix(n, ".")] = true
			nameSet[strings.TrimSuffix(n, ".")+"."] = true
		}
	}
	for n := range nameSet {
		names = append(names, n)
	}
	sort.Strings(names)
	for a := range ipSet {
		ips = append(ips, a)
	}
	sort.Slice(ips, func(i, j int) bool { return ips[i].Less(ips[j]) })
	for p := range portSet {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	return names, ips, ports
}

func (w *world) listen(t *testing.T, addr, dial string, proxy bool, port int) {
	t.Helper()
	ln, err := w.ns.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s in the namespace: %v", addr, err)
	}
	r := &recorder{ln: ln, addr: dial, proxy: proxy, port: port, sentinel: make(chan struct{}, 1)}
	w.listeners = append(w.listeners, r)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ra, _ := netip.ParseAddrPort(c.RemoteAddr().String())
			if from := ra.Addr().Unmap().String(); from == sentinel4 || from == sentinel6 {
				c.Close()
				r.sentinel <- struct{}{}
				continue
			}
			w.mu.Lock()
			i := len(w.seen)
			w.seen = append(w.seen, sighting{proxy: proxy, port: port, local: c.LocalAddr().String()})
			w.mu.Unlock()
			go w.serve(c, r, i)
		}
	}()
}

// serve reads the request head (or a TLS ClientHello), notes it and answers:
// 200 to plain requests, 403 to CONNECT, nothing to TLS.
func (w *world) serve(c net.Conn, r *recorder, i int) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(io.LimitReader(c, 64<<10), 4096)
	first, err := br.Peek(1)
	if err != nil {
		w.note(i, "no bytes")
		return
	}
	if first[0] == 0x16 {
		w.note(i, "TLS "+sniff(br))
		return
	}
	if first[0] == 0x04 || first[0] == 0x05 {
		w.note(i, fmt.Sprintf("SOCKS%d", first[0]))
		return
	}
	line, _ := br.ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	host := ""
	for {
		h, err := br.ReadString('\n')
		h = strings.TrimRight(h, "\r\n")
		if err != nil || h == "" {
			break
		}
		if k, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(k, "host") {
			host = strings.TrimSpace(v)
		}
	}
	w.note(i, line+" (Host: "+host+")")
	if strings.HasPrefix(line, "CONNECT ") {
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	body := "origin\n"
	if r.proxy {
		body = "proxy\n"
	}
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

func (w *world) note(i int, what string) {
	w.mu.Lock()
	if i < len(w.seen) {
		w.seen[i].what = what
	}
	w.mu.Unlock()
}

// sniff returns the server name of a TLS ClientHello, if it has one.
func sniff(br *bufio.Reader) string {
	hdr, err := br.Peek(5)
	if err != nil {
		return ""
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	rec, err := br.Peek(5 + n)
	if err != nil {
		return ""
	}
	b := rec[5:]
	// handshake(1) len(3) version(2) random(32) session id
	if len(b) < 38 || b[0] != 1 {
		return ""
	}
	b = b[38:]
	skip := func(lenBytes int) bool {
		if len(b) < lenBytes {
			return false
		}
		l := 0
		for k := 0; k < lenBytes; k++ {
			l = l<<8 | int(b[k])
		}
		if len(b) < lenBytes+l {
			return false
		}
		b = b[lenBytes+l:]
		return true
	}
	if !skip(1) || !skip(2) || !skip(1) || len(b) < 2 {
		return ""
	}
	b = b[2:]
	for len(b) >= 4 {
		typ, l := int(b[0])<<8|int(b[1]), int(b[2])<<8|int(b[3])
		if len(b) < 4+l {
			return ""
		}
		ext := b[4 : 4+l]
		b = b[4+l:]
		if typ == 0 && len(ext) >= 5 {
			nl := int(ext[3])<<8 | int(ext[4])
			if len(ext) >= 5+nl {
				return "SNI " + string(ext[5:5+nl])
			}
		}
	}
	return ""
}

// barrier returns once every listener has accepted every connection made
// before it was called: each listener's accept queue is FIFO, so when a
// sentinel connection dialled now has been accepted, so has everything the
// client did before.
func (w *world) barrier() error {
	for _, r := range w.listeners {
		from := sentinel4
		if strings.HasPrefix(r.addr, "[") {
			from = sentinel6
		}
		done := make(chan error, 1)
		w.dials <- dialReq{from: from, to: r.addr, done: done}
		if err := <-done; err != nil {
			return fmt.Errorf("barrier dial %s: %w", r.addr, err)
		}
		select {
		case <-r.sentinel:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("barrier: %s did not accept the sentinel", r.addr)
		}
	}
	return nil
}

// take returns and forgets the sightings so far.
func (w *world) take() []sighting {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.seen
	w.seen = nil
	return s
}

// observed turns a case's sightings into the harness notation.
func observed(s []sighting) (string, string) {
	if len(s) == 0 {
		return "E", "no connection"
	}
	codes := map[string]bool{}
	var what []string
	for _, x := range s {
		c := "D"
		if x.proxy {
			c = "P:" + strconv.Itoa(x.port)
		}
		codes[c] = true
		what = append(what, fmt.Sprintf("%s→%s %s", c, x.local, x.what))
	}
	detail := strings.Join(what, "; ")
	if len(codes) > 1 {
		return "X", "connections to more than one place: " + detail
	}
	for c := range codes {
		return c, detail
	}
	return "E", detail
}

// harnessLine is what a client harness prints after each case. Result is
// set only by harnesses whose client is a decision function (proxy-from-env:
// it returns the proxy URL and connects nowhere); for all others the
// listeners decide.
type harnessLine struct {
	ID      string `json:"id"`
	Result  string `json:"result,omitempty"`
	Detail  string `json:"detail"`
	Version string `json:"version,omitempty"`
}

// clientRun is one client process fed cases one at a time.
type clientRun struct {
	name    string   // for messages
	argv    []string // run inside the namespace
	env     []string // the process environment (nil: a minimal one)
	dir     string
	version string // set from the harness's lines when it reports one
	// encode and decode replace the JSON lines (Java speaks TSV).
	encode func(diffCase) []byte
	decode func(string) (harnessLine, error)
}

// run feeds cases to a client process in lock step: a case is written, the
// harness answers with one line once its request has ended, the barrier
// makes sure every connection has been seen, and the sightings become the
// case's result. A process that dies during a case ends that case with what
// was seen (usually nothing: "E", as Node does at startup on a proxy value it
// cannot parse) and is started again for the next one, so every case is
// judged on its own.
//
// The cases are shared out over the lane worlds (laneWorlds), one process
// of the client in each, run side by side: a case's cost is mostly waiting
// (the request, then the barrier), so two lanes take about half the time
// on two cores. Every case is independent (the harnesses set its
// environment per case), so which process runs it does not matter.
func (w *world) run(t *testing.T, cr *clientRun, cases []diffCase) map[string]harnessResult {
	t.Helper()
	lanes := w.laneWorlds(t)
	if len(cases) < 2*len(lanes) {
		lanes = lanes[:1]
	}
	parts := make([][]diffCase, len(lanes))
	for i, c := range cases {
		parts[i%len(lanes)] = append(parts[i%len(lanes)], c)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		res  = map[string]harnessResult{}
		errs []error
	)
	for i, lw := range lanes {
		wg.Add(1)
		go func(lw *world, part []diffCase) {
			defer wg.Done()
			lcr := *cr
			r, _, err := lw.runErr(&lcr, part)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			for k, v := range r {
				res[k] = v
			}
			if lcr.version != "" {
				cr.version = lcr.version
			}
		}(lw, parts[i])
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return res
}

// runErr is run without a *testing.T (lanes run it in goroutines). started
// is false when the process never started (see the shortcut below).
func (w *world) runErr(cr *clientRun, cases []diffCase) (res map[string]harnessResult, started bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var p *clientProc
	defer func() {
		if p != nil {
			p.stop()
		}
	}()
	res = map[string]harnessResult{}
	fresh, startupDeaths, answered, deadAtStart := false, 0, 0, ""
	for _, c := range cases {
		if deadAtStart != "" {
			// The first two processes of the run both died on their first
			// case: the process does not start (a package that cannot load,
			// an environment Node exits on), so every case fails alike.
			res[c.ID] = harnessResult{ID: c.ID, Result: "E", Detail: "no connection [" + deadAtStart + "]"}
			continue
		}
		if p == nil {
			if p, err = w.start(ctx, cr); err != nil {
				return nil, false, err
			}
			fresh = true
		}
		w.take()
		var b []byte
		if cr.encode != nil {
			b = cr.encode(c)
		} else {
			b, _ = json.Marshal(c)
		}
		var hl harnessLine
		dead := ""
		began := time.Now()
		if _, err := p.stdin.Write(append(b, '\n')); err != nil {
			dead = "process exited"
		} else {
			select {
			case l, ok := <-p.lines:
				if !ok {
					dead = "process exited"
					break
				}
				var err error
				if cr.decode != nil {
					hl, err = cr.decode(l)
				} else {
					err = json.Unmarshal([]byte(l), &hl)
				}
				if err != nil || hl.ID != c.ID {
					return nil, true, fmt.Errorf("%s: case %s: harness printed %q (%v)", cr.name, c.ID, l, err)
				}
			case <-time.After(60 * time.Second):
				return nil, true, fmt.Errorf("%s: case %s (%s): no answer in 60s; stderr: %s", cr.name, c.ID, c.URL, p.stderr.String())
			}
		}
		if dead != "" {
			p.stop()
			dead += ": " + errLine(p.stderr.String())
			p = nil
			if fresh && answered == 0 {
				if startupDeaths++; startupDeaths >= 2 {
					deadAtStart = dead
				}
			}
		} else {
			answered++
		}
		fresh = false
		if err := w.barrier(); err != nil {
			return nil, true, fmt.Errorf("%s: %v", cr.name, err)
		}
		code, detail := observed(w.take())
		if hl.Result != "" {
			code, detail = hl.Result, "reported: "+hl.Detail
		} else if hl.Detail != "" {
			detail += " [client: " + hl.Detail + "]"
		}
		if dead != "" {
			detail += " [" + dead + "]"
		}
		if d := time.Since(began); d > 2*time.Second {
			detail += fmt.Sprintf(" [slow: %s]", d.Round(100*time.Millisecond))
		}
		if hl.Version != "" {
			cr.version = hl.Version
		}
		res[c.ID] = harnessResult{ID: c.ID, Result: code, Detail: detail, Version: hl.Version}
	}
	return res, answered > 0 || deadAtStart == "", nil
}

// clientProc is one running harness process.
type clientProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *testutil.SyncBuffer
}

func (w *world) start(ctx context.Context, cr *clientRun) (*clientProc, error) {
	cmd := w.ns.Command(ctx, cr.argv...)
	cmd.Dir = cr.dir
	cmd.Env = cr.env
	if cmd.Env == nil {
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	}
	p := &clientProc{cmd: cmd, lines: make(chan string), stderr: &testutil.SyncBuffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %v", cr.name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p, nil
}

// stop closes stdin (the harness then exits) and waits for the process.
func (p *clientProc) stop() {
	p.stdin.Close()
	for range p.lines {
	}
	p.cmd.Wait()
}

// errLine picks the line of a crashed process's stderr that says what went
// wrong (the first "...Error..." line, else the first line).
func errLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if l = strings.TrimSpace(l); strings.Contains(l, "Error") || strings.Contains(l, "error:") {
			return l
		}
	}
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "(node:") {
			return l
		}
	}
	return "no output"
}

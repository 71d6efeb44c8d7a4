package doctor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"egret.io/egret/internal/noproxy"
)

// Status is a check's verdict. The zero value is not a valid status.
type Status int

// The verdicts, in increasing order of badness.
const (
	Pass Status = iota + 1 // as it should be
	Warn                   // works, or could not be tested, but deserves a look
	Fail                   // broken: the advice says what to change
)

// String returns "pass", "warn" or "fail".
func (s Status) String() string {
	switch s {
	case Pass:
		return "pass"
	case Warn:
		return "warn"
	case Fail:
		return "fail"
	default:
		return "unknown(" + strconv.Itoa(int(s)) + ")"
	}
}

// MarshalText writes the String form.
func (s Status) MarshalText() ([]byte, error) {
	if s < Pass || s > Fail {
		return nil, fmt.Errorf("invalid status %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads "pass", "warn" or "fail".
func (s *Status) UnmarshalText(b []byte) error {
	switch string(b) {
	case "pass":
		*s = Pass
	case "warn":
		*s = Warn
	case "fail":
		*s = Fail
	default:
		return fmt.Errorf("unknown status %q (want pass, warn or fail)", b)
	}
	return nil
}

// Result is what one check found.
type Result struct {
	Status  Status
	Summary string   // one line: what was seen
	Details []string // supporting observations, one per line
	Advice  string   // what to do; "" when there is nothing to do
}

// Check is one step of the runbook.
type Check struct {
	// Name is the kind of check ("env", "pid1-env", "no-proxy", "dns",
	// "direct", "runtimes", "proxy", "egress-ip"); stable, used in JSON.
	Name string
	// Target is what the check looks at (a name, URL or proxy), "" if
	// nothing in particular.
	Target string
	// Run performs the check. It must return by the time ctx is done and
	// report network failures in the Result, never panic.
	Run func(ctx context.Context) Result

	path string // which of the runbook's four paths it belongs to (pathOf)
}

// Outcome is a Check's Result, as reported.
type Outcome struct {
	Name    string   `json:"name"`
	Target  string   `json:"target"`
	Status  Status   `json:"status"`
	Summary string   `json:"summary"`
	Details []string `json:"details"`
	Advice  string   `json:"advice"`
	// Path is which of the runbook's four paths the check proves:
	// "service-direct", "intranet-direct", "outside-via-proxy",
	// "forbidden-blocked", or "" for the environment checks.
	Path    string        `json:"path"`
	Elapsed time.Duration `json:"-"`
}

// Defaults for zero Options fields.
const (
	// DefaultTimeout bounds one network operation (a lookup, a connect, an
	// HTTP exchange).
	DefaultTimeout = 5 * time.Second
	// DefaultPID1Environ is where PID 1's environment is read.
	DefaultPID1Environ = "/proc/1/environ"
	// DefaultResolvConf is where the DNS search list is read.
	DefaultResolvConf = "/etc/resolv.conf"
	// DefaultClusterDomain is assumed when resolv.conf does not name one.
	DefaultClusterDomain = "cluster.local"
	// DefaultServiceAccount is where the kubelet mounts the pod's
	// service-account token.
	DefaultServiceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"
	// DefaultPodInfo is the conventional mount of a downward-API volume
	// (the Kubernetes documentation's example).
	DefaultPodInfo = "/etc/podinfo"
	// maxParallel bounds how many checks run at once.
	maxParallel = 16
)

// DefaultInternal are the internal names checked when Options.Internal is
// empty; the cluster domain from resolv.conf's search list adds the FQDN.
func DefaultInternal() []string { return []string{"kubernetes.default.svc"} }

// Options say what to check. The zero value checks the environment, DNS and
// the runtimes for the default internal names.
type Options struct {
	// Echo is the URL of an `egret echo` server outside the cluster; ""
	// skips the CONNECT and egress IP checks.
	Echo string
	// Internal are in-cluster destinations: NAME, NAME:PORT or an http(s)
	// URL (then also fetched). A NAME without a port means port 443 for the
	// API server names (kubernetes, kubernetes.default, ...) and 80
	// otherwise. Empty: DefaultInternal plus its FQDN.
	Internal []string
	// Proxy replaces the proxy from the environment (the *_PROXY variable
	// for the echo URL's scheme); "" uses the environment.
	Proxy string
	// Clients are the noproxy client names whose behaviour is predicted;
	// empty means "go" plus the runtimes found on PATH; "all" means every
	// model.
	Clients []string
	// Timeout bounds each network operation; zero means DefaultTimeout.
	Timeout time.Duration
	// TLS are https URLs the tls check connects to through the proxy
	// (check_tls.go); empty: the echo URL when it is https.
	TLS []string
	// SecondEcho is another `egret echo` URL (another site, or one per
	// address family); the egress-ip check samples both and compares what
	// they see. "" means Echo alone.
	SecondEcho string
	// Samples is how many requests the egress-ip check sends on each path
	// (direct and through the proxy) per echo endpoint and address family;
	// zero means 1, at most MaxSamples.
	Samples int
	// ExpectEgressIP are the addresses (IP or CIDR) the outside must see
	// for traffic through the proxy: the gateway's allow-listed egress IPs.
	// Empty: any address, but one that varies between samples warns.
	ExpectEgressIP []string
	// Family limits the address family of the egress-ip and forbidden
	// checks: "4", "6", or "" for each family the destination has.
	Family string
	// Forbidden are URLs that must be blocked: neither reachable directly
	// (a NetworkPolicy or firewall drops or rejects) nor through the proxy
	// (its policy refuses) — the fourth path of the runbook.
	Forbidden []string
	// Intranet are destinations outside the cluster that must be reached
	// directly (NO_PROXY covers them): NAME, NAME:PORT or an http(s) URL,
	// checked like Internal.
	Intranet []string
	// AppPID, when not zero, makes the doctor check as the process with
	// this PID would (kubectl debug --target): its environment, its PATH and
	// executable looked up in its root file system, its resolv.conf and CA
	// files (adopt.go).
	AppPID int
}

// MaxSamples bounds Options.Samples.
const MaxSamples = 50

// Resolver looks names up. *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Deps are the doctor's windows on the system. Every nil or empty field has
// the default named in its comment.
type Deps struct {
	// Environ is this process's environment, NAME=VALUE; nil means
	// os.Environ().
	Environ []string
	// PID1Environ is the path of PID 1's environment; "" means
	// DefaultPID1Environ. PID 1's command line is read beside it
	// ("cmdline").
	PID1Environ string
	// ResolvConf is the path of resolv.conf; "" means DefaultResolvConf.
	ResolvConf string
	// Resolver looks up absolute names (the doctor applies the search
	// list itself); nil means net.DefaultResolver.
	Resolver Resolver
	// Dial connects to an IP address and port; nil means a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// LookPath finds runtimes on PATH; nil means exec.LookPath.
	LookPath func(file string) (string, error)
	// TLSConfig verifies https echo servers and https proxies; nil means
	// the system roots.
	TLSConfig *tls.Config
	// Proc is where the proc file system is mounted; "" means "/proc".
	// Options.AppPID reads PROC/PID, the record reads the container
	// runtime's view of this process.
	Proc string
	// Root is the application's root file system, prefixed to the files it
	// reads (CA bundles); "" means "/". Options.AppPID sets it to
	// PROC/PID/root.
	Root string
	// ServiceAccount is the directory holding the pod's service-account
	// token, ca.crt and namespace, used to read the pod's own object for
	// the run record; "" means DefaultServiceAccount (under Root).
	ServiceAccount string
	// PodInfo is a downward-API volume with the pod's "annotations" (and
	// "labels") files; "" means DefaultPodInfo (under Root).
	PodInfo string
	// Hostname returns the pod's host name (its name, unless set); nil
	// means os.Hostname.
	Hostname func() (string, error)
	// Now is the clock of the run record; nil means time.Now.
	Now func() time.Time
	// appExe is the adopted process's executable (set by adopt).
	appExe string
}

func (d Deps) withDefaults() Deps {
	if d.Environ == nil {
		d.Environ = os.Environ()
	}
	if d.PID1Environ == "" {
		d.PID1Environ = DefaultPID1Environ
	}
	if d.ResolvConf == "" {
		d.ResolvConf = DefaultResolvConf
	}
	if d.Resolver == nil {
		d.Resolver = net.DefaultResolver
	}
	if d.Dial == nil {
		var nd net.Dialer
		d.Dial = nd.DialContext
	}
	if d.LookPath == nil {
		d.LookPath = exec.LookPath
	}
	if d.Proc == "" {
		d.Proc = "/proc"
	}
	if d.Root == "" {
		d.Root = "/"
	}
	if d.ServiceAccount == "" {
		d.ServiceAccount = filepath.Join(d.Root, DefaultServiceAccount)
	}
	if d.PodInfo == "" {
		d.PodInfo = filepath.Join(d.Root, DefaultPodInfo)
	}
	if d.Hostname == nil {
		d.Hostname = os.Hostname
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return d
}

// target is an internal destination.
type target struct {
	raw  string
	host string // lower case, no brackets, no trailing dot
	port uint16
	url  *url.URL // set when given as a URL: fetched too
	// intranet: given with --intranet (outside the cluster, must go
	// direct), not --internal.
	intranet bool
}

// apiServerNames get port 443 when no port is given.
func apiServerName(h string) bool {
	return h == "kubernetes" || strings.HasPrefix(h, "kubernetes.default")
}

// parseTarget reads NAME, NAME:PORT, IP, [IPv6]:PORT or an http(s) URL.
func parseTarget(s string) (target, error) {
	s = strings.TrimSpace(s)
	t := target{raw: s}
	if s == "" {
		return t, errors.New("empty name")
	}
	hostport := s
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return t, fmt.Errorf("%q: %w", s, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return t, fmt.Errorf("%q: only http:// and https:// URLs", s)
		}
		if u.Hostname() == "" {
			return t, fmt.Errorf("%q: no host", s)
		}
		if u.Path == "" {
			u.Path = "/"
		}
		t.url = u
		hostport = u.Host
		if u.Port() == "" {
			hostport = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
	}
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portStr = hostport, ""
		if strings.Count(host, ":") > 1 { // bare IPv6
			host = strings.Trim(host, "[]")
		}
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" || strings.ContainsAny(host, "/ @") {
		return t, fmt.Errorf("%q: not a host name, IP or URL", s)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return t, fmt.Errorf("%q: zoned addresses are not supported", s)
		}
		host = a.Unmap().String()
	}
	t.host = host
	switch {
	case portStr != "":
		p, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || p == 0 {
			return t, fmt.Errorf("%q: bad port %q", s, portStr)
		}
		t.port = uint16(p)
	case apiServerName(host):
		t.port = 443
	default:
		t.port = 80
	}
	return t, nil
}

// hostPort returns host:port for dialing or CONNECT.
func (t target) hostPort() string { return net.JoinHostPort(t.host, strconv.Itoa(int(t.port))) }

// urlFor returns the URL a client would use for this target with host h.
func (t target) urlFor(h string) string {
	if t.url != nil {
		u := *t.url
		u.Host = net.JoinHostPort(h, strconv.Itoa(int(t.port)))
		if (u.Scheme == "http" && t.port == 80) || (u.Scheme == "https" && t.port == 443) {
			u.Host = bracket(h)
		}
		return u.String()
	}
	switch t.port {
	case 443:
		return "https://" + bracket(h) + "/"
	case 80:
		return "http://" + bracket(h) + "/"
	}
	return "http://" + net.JoinHostPort(h, strconv.Itoa(int(t.port))) + "/"
}

func bracket(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// Checks validates o and builds the runbook's checks in report order. An
// error means bad options (a usage error); nothing has been run.
func Checks(o Options, d Deps) ([]Check, error) {
	s, err := newState(o, d)
	if err != nil {
		return nil, err
	}
	return s.checks(), nil
}

// checks builds the runbook's checks in report order.
func (s *state) checks() []Check {
	checks := []Check{s.envCheck(), s.pid1Check(), s.noProxyCheck(), s.interceptorCheck()}
	checks = append(checks, s.dnsChecks()...)
	for _, t := range s.internal {
		checks = append(checks, s.directCheck(t))
	}
	for _, t := range s.internal {
		checks = append(checks, s.runtimesInternalCheck(t))
	}
	checks = append(checks, s.runtimesEchoCheck())
	checks = append(checks, s.proxyChecks()...)
	checks = append(checks, s.egressCheck())
	checks = append(checks, s.forbiddenChecks()...)
	checks = append(checks, s.tlsChecks()...)
	for i := range checks {
		checks[i].path = s.pathOf(checks[i])
	}
	return checks
}

// parseEcho validates an echo URL given with flag.
func parseEcho(flag, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %q: not a URL", flag, redact(raw))
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%s %q: want an http:// or https:// URL", flag, redact(raw))
	case u.Hostname() == "":
		return nil, fmt.Errorf("%s %q: no host", flag, redact(raw))
	case u.User != nil:
		return nil, fmt.Errorf("%s: the URL takes no user info", flag)
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return u, nil
}

// newState validates o, adopts the application's process when asked, and
// gathers the facts every check reads.
func newState(o Options, d Deps) (*state, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	var errs []error
	if o.AppPID != 0 {
		ad, err := adopt(d, o.AppPID)
		if err != nil {
			return nil, fmt.Errorf("--app-pid: %w", err)
		}
		d = ad
	}
	d = d.withDefaults()
	s := &state{o: o, d: d, rec: &recorder{}}
	if o.Echo != "" {
		u, err := parseEcho("--echo", o.Echo)
		if err != nil {
			errs = append(errs, err)
		}
		s.echo = u
	}
	if o.SecondEcho != "" {
		switch u, err := parseEcho("--echo", o.SecondEcho); {
		case err != nil:
			errs = append(errs, err)
		case o.Echo == "":
			errs = append(errs, errors.New("--echo: a second echo URL needs a first"))
		default:
			s.echo2 = u
		}
	}
	switch {
	case o.Samples < 0 || o.Samples > MaxSamples:
		errs = append(errs, fmt.Errorf("--samples %d: want 1 to %d", o.Samples, MaxSamples))
	case o.Samples == 0:
		s.o.Samples = 1
	}
	for _, raw := range o.ExpectEgressIP {
		p, err := parseIPOrPrefix(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("--expect-egress-ip: %w", err))
			continue
		}
		s.expect = append(s.expect, p)
	}
	if len(o.ExpectEgressIP) > 0 && o.Echo == "" {
		errs = append(errs, errors.New("--expect-egress-ip needs --echo (the echo server tells the egress IP)"))
	}
	switch o.Family {
	case "", "4", "6":
	case "ipv4", "IPv4":
		s.o.Family = "4"
	case "ipv6", "IPv6":
		s.o.Family = "6"
	default:
		errs = append(errs, fmt.Errorf("--family %q: want 4 or 6 (default: each family the destination has)", o.Family))
	}
	for _, raw := range o.Forbidden {
		u, err := parseEcho("--forbidden", raw)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.forbidden = append(s.forbidden, u)
	}
	if o.Proxy != "" {
		p, err := parseProxyURL(o.Proxy)
		if err != nil {
			errs = append(errs, fmt.Errorf("--proxy: %w", err))
		}
		s.proxyFlag = p
	}
	if len(o.Clients) > 0 {
		names := o.Clients
		if len(names) == 1 && names[0] == "all" {
			names = nil
		}
		cs, err := noproxy.SelectClients(names)
		if err != nil {
			errs = append(errs, fmt.Errorf("--client: %w", err))
		}
		s.clients = cs
		s.clientsWhy = "given with --client"
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.env = envFromList(d.Environ)
	s.rc, s.rcErr = readResolvConf(d.ResolvConf)
	s.lk = newLookups(s)
	if s.clients == nil {
		s.clients, s.clientsWhy = detectClients(d.LookPath, d.appExe)
	}
	internal := o.Internal
	if len(internal) == 0 {
		internal = append(DefaultInternal(), "kubernetes.default.svc."+s.clusterDomain())
	}
	seen := map[string]bool{}
	for _, group := range []struct {
		flag  string
		names []string
	}{{"--internal", internal}, {"--intranet", o.Intranet}} {
		for _, raw := range group.names {
			t, err := parseTarget(raw)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", group.flag, err))
				continue
			}
			t.intranet = group.flag == "--intranet"
			if !seen[t.raw] {
				seen[t.raw] = true
				s.internal = append(s.internal, t)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// parseIPOrPrefix reads an address (a /32 or /128) or a CIDR.
func parseIPOrPrefix(raw string) (netip.Prefix, error) {
	raw = strings.TrimSpace(raw)
	if strings.Contains(raw, "/") {
		p, err := netip.ParsePrefix(raw)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", raw)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(strings.Trim(raw, "[]"))
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", raw)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// RunChecks runs checks in parallel, each with its own deadline (limit; 0
// means a minute), and returns their outcomes in the order given. A check
// that panics or overruns its deadline fails; it never stops the others.
func RunChecks(ctx context.Context, checks []Check, limit time.Duration) []Outcome {
	if limit <= 0 {
		limit = time.Minute
	}
	out := make([]Outcome, len(checks))
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = runOne(ctx, c, limit)
		}()
	}
	wg.Wait()
	return out
}

// runOne runs c under limit, turning a panic or an overrun into a failure.
func runOne(ctx context.Context, c Check, limit time.Duration) Outcome {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	done := make(chan Result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- Result{Status: Fail, Summary: fmt.Sprintf("internal error in the %s check: %v", c.Name, p),
					Details: panicFrames(debug.Stack()),
					Advice:  "Report this as an egret bug, with these details."}
			}
		}()
		done <- c.Run(cctx)
	}()
	var r Result
	select {
	case r = <-done:
	case <-cctx.Done():
		// Give a well-behaved check a moment to report its own timeout.
		select {
		case r = <-done:
		case <-time.After(time.Second):
			r = Result{Status: Fail, Summary: fmt.Sprintf("the check did not finish within %s", limit),
				Advice: "something on the way blocks: rerun with a larger --timeout to see which step hangs"}
		}
	}
	if r.Status < Pass || r.Status > Fail {
		r.Status = Fail
	}
	if r.Details == nil {
		r.Details = []string{}
	}
	return Outcome{Name: c.Name, Target: c.Target, Status: r.Status, Summary: r.Summary, Details: r.Details,
		Advice: r.Advice, Path: c.path, Elapsed: time.Since(start)}
}

// panicFrames keeps the egret frames of a panic's stack (function and
// file:line), at most five.
func panicFrames(stack []byte) []string {
	lines := strings.Split(string(stack), "\n")
	var out []string
	for i := 0; i+1 < len(lines) && len(out) < 5; i++ {
		if strings.HasPrefix(lines[i], "egret.io/") && !strings.Contains(lines[i], "doctor.runOne") {
			out = append(out, lines[i]+" "+strings.TrimSpace(lines[i+1]))
		}
	}
	return out
}

// Run builds the checks for o and d and runs them. The error is a usage
// error from Checks; network problems are outcomes.
func Run(ctx context.Context, o Options, d Deps) ([]Outcome, error) {
	r, err := RunReport(ctx, o, d)
	if err != nil {
		return nil, err
	}
	return r.Checks, nil
}

// Report is a whole run: the record of where and how it ran, and the
// checks' outcomes.
type Report struct {
	Record Record    `json:"record"`
	Checks []Outcome `json:"checks"`
}

// RunReport builds the checks for o and d, runs them and gathers the run
// record (record.go) beside them. The error is a usage error; network
// problems are outcomes.
func RunReport(ctx context.Context, o Options, d Deps) (*Report, error) {
	s, err := newState(o, d)
	if err != nil {
		return nil, err
	}
	checks := s.checks()
	t := s.o.Timeout
	// A check makes at most four bounded steps; the egress check repeats
	// its steps per sample.
	limit := time.Duration(4+3*(s.o.Samples-1))*t + 2*time.Second
	pod := make(chan podFacts, 1)
	go func() { pod <- s.pod(ctx) }()
	outs := RunChecks(ctx, checks, limit)
	return &Report{Record: s.record(<-pod, outs), Checks: outs}, nil
}

// Worst returns the worst status among outs, or Pass when there are none.
func Worst(outs []Outcome) Status {
	w := Pass
	for _, o := range outs {
		if o.Status > w {
			w = o.Status
		}
	}
	return w
}

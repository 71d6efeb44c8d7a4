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
}

// Outcome is a Check's Result, as reported.
type Outcome struct {
	Name    string        `json:"name"`
	Target  string        `json:"target"`
	Status  Status        `json:"status"`
	Summary string        `json:"summary"`
	Details []string      `json:"details"`
	Advice  string        `json:"advice"`
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
}

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
	return d
}

// target is an internal destination.
type target struct {
	raw  string
	host string // lower case, no brackets, no trailing dot
	port uint16
	url  *url.URL // set when given as a URL: fetched too
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
	d = d.withDefaults()
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	s := &state{o: o, d: d}
	var errs []error
	if o.Echo != "" {
		u, err := url.Parse(o.Echo)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--echo %q: not a URL", redact(o.Echo)))
		case u.Scheme != "http" && u.Scheme != "https":
			errs = append(errs, fmt.Errorf("--echo %q: want an http:// or https:// URL", redact(o.Echo)))
		case u.Hostname() == "":
			errs = append(errs, fmt.Errorf("--echo %q: no host", redact(o.Echo)))
		case u.User != nil:
			errs = append(errs, fmt.Errorf("--echo: the echo URL takes no user info"))
		default:
			if u.Path == "" {
				u.Path = "/"
			}
			s.echo = u
		}
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
		s.clients, s.clientsWhy = detectClients(d.LookPath)
	}
	internal := o.Internal
	if len(internal) == 0 {
		internal = append(DefaultInternal(), "kubernetes.default.svc."+s.clusterDomain())
	}
	seen := map[string]bool{}
	for _, raw := range internal {
		t, err := parseTarget(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("--internal: %w", err))
			continue
		}
		if !seen[t.raw] {
			seen[t.raw] = true
			s.internal = append(s.internal, t)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	checks := []Check{s.envCheck(), s.pid1Check(), s.noProxyCheck()}
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
	checks = append(checks, s.tlsChecks()...)
	return checks, nil
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
		Advice: r.Advice, Elapsed: time.Since(start)}
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
	checks, err := Checks(o, d)
	if err != nil {
		return nil, err
	}
	t := o.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return RunChecks(ctx, checks, 4*t+2*time.Second), nil
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

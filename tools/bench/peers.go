package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The proxies, in the table's order.
const (
	pEgret       = "egret"
	pGateway     = "egret-gateway"
	pTrafficSrv  = "trafficserver"
	pMinproxy    = "minproxy"
	pSquid       = "squid"
	pSmokescreen = "smokescreen"
	pTinyproxy   = "tinyproxy"
	pIntercept   = "egret-intercept"
	pGwIntercept = "egret-gw-intercept"
	pSquidBump   = "squid-bump"
	pDirect      = "direct"
	defaultPeers = pEgret + "," + pGateway + "," + pTrafficSrv + "," + pMinproxy + "," + pSquid + "," + pSmokescreen + "," + pTinyproxy + "," +
		pIntercept + "," + pGwIntercept + "," + pSquidBump + "," + pDirect
	installedHint = " (scripts/bench-deps.sh installs it)"
)

// gatewayOriginHost is the name egret-gateway is asked for the origin by:
// scripts/bench-gateway.yaml answers it with a static address, so the
// gateway resolves it, routes it through its rules and guards the address
// it dials, as for any destination outside. The origin must listen there.
const gatewayOriginHost = "origin.bench.egret.test"

// peer is one proxy being measured: the process, and how the workloads
// reach the origin through it.
type peer struct {
	proxyInfo
	URL  string // proxy URL; "" for direct
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	log  string
}

func (p *peer) target() target { return target{Proxy: p.URL, Host: p.Target} }

// intercepts reports whether p terminates TLS (the intercept tests' peers,
// which run those tests only).
func (p *peer) intercepts() bool {
	return p.Name == pIntercept || p.Name == pGwIntercept || p.Name == pSquidBump
}

// runs reports whether test is measured through p: the intercept tests
// through the intercepting proxies (and direct, the ceiling), the others
// through the rest.
func (p *peer) runs(test string) bool {
	return p.Name == pDirect || interceptTest(test) == p.intercepts()
}

// cpu is the CPU time p has used: with its helper processes for Squid's
// ssl-bump (the certificate generator runs beside it).
func (p *peer) cpu() (time.Duration, error) {
	if p.Name == pSquidBump {
		return cpuTimeTree(p.PID)
	}
	return cpuTime(p.PID)
}

// defaultSquidOpenSSL is where scripts/bench-deps.sh unpacks Debian's
// squid-openssl (beside, not instead of, the squid package the tests use:
// the two conflict).
func defaultSquidOpenSSL() string {
	c := os.Getenv("EGRET_CACHE")
	if c == "" {
		home, _ := os.UserHomeDir()
		c = filepath.Join(home, ".cache", "egret")
	}
	return filepath.Join(c, "bench", "squid-openssl", "usr", "sbin", "squid")
}

// spec says how to start one kind of proxy: the program and its arguments
// for a listen address, with files in dir.
type spec struct {
	argv    []string
	env     []string
	config  string // one line for the report
	version string
}

// specFor prepares proxy name to listen on addr (127.0.0.1:port), writing
// its configuration into dir. It fails when the proxy is not installed.
func (r *runner) specFor(name, addr, dir string) (spec, error) {
	_, port, _ := net.SplitHostPort(addr)
	switch name {
	case pEgret:
		if err := executable(r.opt.egret, "-egret; make build"); err != nil {
			return spec{}, err
		}
		return spec{
			argv:    []string{r.opt.egret, "proxy", "--listen", addr, "--admin-listen", "127.0.0.1:0"},
			config:  "egret proxy with the sidecar defaults",
			version: firstLine(r.output(r.opt.egret, "version")),
		}, nil
	case pGateway:
		if err := executable(r.opt.egret, "-egret; make build"); err != nil {
			return spec{}, err
		}
		if _, err := os.Stat(r.opt.gatewayConfig); err != nil {
			return spec{}, fmt.Errorf("-gateway-config: %w", err)
		}
		return spec{
			argv:    []string{r.opt.egret, "proxy", "--config", r.opt.gatewayConfig, "--listen", addr, "--admin-listen", "127.0.0.1:0"},
			config:  "egret proxy --config " + r.opt.gatewayConfig,
			version: firstLine(r.output(r.opt.egret, "version")),
		}, nil
	case pMinproxy:
		bin := r.opt.minproxy
		if bin == "" {
			bin = filepath.Join(r.dir, "bin", "minproxy")
			cmd := exec.Command("go", "build", "-o", bin, "egret.io/egret/tools/bench/minproxy")
			if out, err := cmd.CombinedOutput(); err != nil {
				return spec{}, fmt.Errorf("go build egret.io/egret/tools/bench/minproxy (run from the egret repository, or give -minproxy): %v\n%s", err, out)
			}
		}
		if err := executable(bin, "-minproxy"); err != nil {
			return spec{}, err
		}
		return spec{argv: []string{bin, "-listen", addr}, config: "tools/bench/minproxy", version: goVersion(bin)}, nil
	case pSquid:
		bin, err := exec.LookPath("squid")
		if err != nil {
			return spec{}, errors.New("squid is not on PATH" + installedHint)
		}
		conf := filepath.Join(dir, "squid.conf")
		err = os.WriteFile(conf, []byte(fmt.Sprintf(`# a forward proxy, no cache, CONNECT to any port
http_port %s
http_access allow all
cache deny all
cache_mem 8 MB
access_log stdio:%[2]s/access.log
cache_log %[2]s/cache.log
pid_filename %[2]s/squid.pid
coredump_dir %[2]s
max_filedescriptors 65535
visible_hostname bench
shutdown_lifetime 0 seconds
`, addr, dir)), 0o644)
		if err != nil {
			return spec{}, err
		}
		return spec{argv: []string{bin, "-N", "-f", conf}, config: "squid -N, no cache, access log", version: firstLine(r.output(bin, "-v"))}, nil
	case pTinyproxy:
		bin, err := exec.LookPath("tinyproxy")
		if err != nil {
			return spec{}, errors.New("tinyproxy is not on PATH" + installedHint)
		}
		conf := filepath.Join(dir, "tinyproxy.conf")
		err = os.WriteFile(conf, []byte(fmt.Sprintf(`Port %s
Listen 127.0.0.1
Timeout 600
MaxClients 65535
LogFile "%s/tinyproxy.log"
LogLevel Info
`, port, dir)), 0o644)
		if err != nil {
			return spec{}, err
		}
		return spec{argv: []string{bin, "-d", "-c", conf}, config: "tinyproxy -d, log level Info", version: firstLine(r.output(bin, "-v"))}, nil
	case pSmokescreen:
		bin := r.opt.smokescreen
		if bin == "" {
			return spec{}, errors.New("no -smokescreen binary" + installedHint)
		}
		if err := executable(bin, "-smokescreen"); err != nil {
			return spec{}, err
		}
		return spec{
			argv: []string{bin, "--listen-ip", "127.0.0.1", "--listen-port", port,
				"--unsafe-allow-private-ranges", "--allow-range", "127.0.0.0/8", "--statsd-address", "127.0.0.1:1"},
			config:  "smokescreen with 127.0.0.0/8 allowed",
			version: goVersion(bin),
		}, nil
	case pTrafficSrv:
		return r.trafficServer(port, dir)
	case pIntercept, pGwIntercept, pSquidBump:
		if r.tls == nil {
			return spec{}, errors.New("it measures only the intercept tests (-tests intercept,intercept-ka)")
		}
	}
	switch name {
	case pIntercept:
		bin := r.opt.interceptd
		if bin == "" {
			bin = filepath.Join(r.dir, "bin", "interceptd")
			cmd := exec.Command("go", "build", "-o", bin, "egret.io/egret/tools/bench/interceptd")
			if out, err := cmd.CombinedOutput(); err != nil {
				return spec{}, fmt.Errorf("go build egret.io/egret/tools/bench/interceptd (run from the egret repository, or give -interceptd): %v\n%s", err, out)
			}
		}
		if err := executable(bin, "-interceptd"); err != nil {
			return spec{}, err
		}
		return spec{argv: []string{bin, "-listen", addr, "-ca-dir", r.tls.caDir, "-origin-ca", r.tls.originCA, "-token", r.tls.token,
			"-access-log", filepath.Join(dir, "access.log")},
			config:  "tools/bench/interceptd: internal/intercept's Engine, a bearer token injected, GET/HEAD allowed by a rule, JSON access log",
			version: goVersion(bin)}, nil
	case pGwIntercept:
		return r.gatewayIntercept(addr, dir)
	case pSquidBump:
		return r.squidBump(addr, dir)
	}
	return spec{}, fmt.Errorf("unknown proxy (the proxies: %s)", defaultPeers)
}

// trafficServer configures Apache Traffic Server as a forward proxy: the
// packaged configuration, copied, with no cache (no storage at all), no
// remap, CONNECT to any port, connection limits above what the idle test
// holds, and inactivity timeouts above what a run lasts (the default 30 s
// would close idle tunnels while the idle test is still opening them). Its
// logs and state stay in dir.
func (r *runner) trafficServer(port, dir string) (spec, error) {
	bin, err := exec.LookPath("traffic_server")
	if err != nil {
		return spec{}, errors.New("traffic_server is not on PATH" + installedHint)
	}
	etc := filepath.Join(dir, "etc")
	if err := os.CopyFS(etc, os.DirFS(r.opt.atsConfig)); err != nil {
		return spec{}, fmt.Errorf("copy %s: %w", r.opt.atsConfig, err)
	}
	if err := os.WriteFile(filepath.Join(etc, "storage.config"), nil, 0o644); err != nil {
		return spec{}, err
	}
	rec, err := os.OpenFile(filepath.Join(etc, "records.config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return spec{}, err
	}
	// Later lines override earlier ones.
	_, err = fmt.Fprintf(rec, `
# tools/bench: a forward proxy on loopback
CONFIG proxy.config.http.server_ports STRING %s:ip-in=127.0.0.1
CONFIG proxy.config.url_remap.remap_required INT 0
CONFIG proxy.config.reverse_proxy.enabled INT 0
CONFIG proxy.config.http.cache.http INT 0
CONFIG proxy.config.http.connect_ports STRING 1-65535
CONFIG proxy.config.net.connections_throttle INT 100000
CONFIG proxy.config.net.max_connections_in INT 100000
CONFIG proxy.config.http.transaction_no_activity_timeout_in INT 3600
CONFIG proxy.config.http.transaction_no_activity_timeout_out INT 3600
CONFIG proxy.config.log.logfile_dir STRING %[2]s
CONFIG proxy.config.local_state_dir STRING %[2]s
%[3]s`, port, dir, sameUser())
	if cerr := rec.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return spec{}, err
	}
	return spec{
		argv:    []string{bin},
		env:     []string{"PROXY_CONFIG_CONFIG_DIR=" + etc},
		config:  r.opt.atsConfig + " copied: no cache, no remap, CONNECT to any port",
		version: firstLine(r.output(bin, "-V")),
	}, nil
}

// squidBump configures Squid built with OpenSSL to bump every CONNECT: peek
// at the ClientHello, then terminate TLS with a leaf generated from the
// bench's interception CA (cached in memory after the first), and
// originate TLS to the origin verified with the bench's origin CA. Like
// egret-intercept it logs every request; unlike it, it injects nothing and
// judges no method or path.
func (r *runner) squidBump(addr, dir string) (spec, error) {
	bin := r.opt.squidOpenSSL
	if err := executable(bin, "-squid-openssl; scripts/bench-deps.sh unpacks Debian's squid-openssl"); err != nil {
		return spec{}, err
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(bin))) // .../usr/sbin/squid → ...
	certgen := filepath.Join(root, "usr", "lib", "squid", "security_file_certgen")
	if err := executable(certgen, "squid-openssl's security_file_certgen"); err != nil {
		return spec{}, err
	}
	// Squid runs its helpers as its own user ("proxy"), which may not
	// reach the cache (under root's home): a copy in the work directory.
	b, err := os.ReadFile(certgen)
	if err != nil {
		return spec{}, err
	}
	certgen = filepath.Join(dir, "security_file_certgen")
	if err := os.WriteFile(certgen, b, 0o755); err != nil {
		return spec{}, err
	}
	db := filepath.Join(dir, "ssl_db")
	if out, err := exec.Command(certgen, "-c", "-s", db, "-M", "16MB").CombinedOutput(); err != nil {
		return spec{}, fmt.Errorf("%s -c: %v\n%s", certgen, err, out)
	}
	os.Chmod(db, 0o777)
	filepath.WalkDir(db, func(p string, _ os.DirEntry, _ error) error { os.Chmod(p, 0o777); return nil })
	// Squid reads the CA as one file with the certificate and the key.
	ca := filepath.Join(dir, "bump-ca.pem")
	c, err := os.ReadFile(filepath.Join(r.tls.caDir, "tls.crt"))
	if err != nil {
		return spec{}, err
	}
	k, err := os.ReadFile(filepath.Join(r.tls.caDir, "tls.key"))
	if err != nil {
		return spec{}, err
	}
	if err := os.WriteFile(ca, append(c, k...), 0o644); err != nil {
		return spec{}, err
	}
	conf := filepath.Join(dir, "squid.conf")
	err = os.WriteFile(conf, []byte(fmt.Sprintf(`# ssl-bump every CONNECT, no cache
http_port %s ssl-bump tls-cert=%s generate-host-certificates=on dynamic_cert_mem_cache_size=16MB
sslcrtd_program %s -s %s -M 16MB
sslcrtd_children 4 startup=1 idle=1
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
tls_outgoing_options cafile=%s
http_access allow all
cache deny all
cache_mem 8 MB
access_log stdio:%[6]s/access.log
cache_log %[6]s/cache.log
pid_filename %[6]s/squid.pid
coredump_dir %[6]s
max_filedescriptors 65535
visible_hostname bench
shutdown_lifetime 0 seconds
`, addr, ca, certgen, db, r.tls.originCA, dir)), 0o644)
	if err != nil {
		return spec{}, err
	}
	return spec{argv: []string{bin, "-N", "-f", conf}, config: "squid-openssl -N, ssl-bump (peek, bump), leaves cached in memory, no cache, access log",
		version: firstLine(r.output(bin, "-v"))}, nil
}

// sameUser keeps Traffic Server as the user that starts it when that is not
// root: only root can become the packaged "trafficserver" user.
func sameUser() string {
	if os.Geteuid() == 0 {
		return ""
	}
	u, err := user.Current()
	if err != nil {
		return ""
	}
	return "CONFIG proxy.config.admin.user_id STRING " + u.Username + "\n"
}

// startPeer starts proxy name and checks that it forwards a request and a
// tunnel to the origin.
func (r *runner) startPeer(ctx context.Context, name string) (*peer, error) {
	p := &peer{proxyInfo: proxyInfo{Name: name, Target: r.origin.Addr}}
	if name == pDirect {
		p.Config = "no proxy: the origin directly"
		return p, r.probe(p)
	}
	if name == pGateway {
		_, port, _ := net.SplitHostPort(r.origin.Addr)
		p.Target = net.JoinHostPort(gatewayOriginHost, port)
	}
	dir := filepath.Join(r.dir, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o777) // squid and traffic_server drop to their own users and write here
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	sp, err := r.specFor(name, addr, dir)
	if err != nil {
		return nil, err
	}
	p.URL, p.Config, p.Version = "http://"+addr, sp.config, sp.version
	p.log = filepath.Join(dir, name+".log")
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(sp.argv[0], sp.argv[1:]...)
	p.cmd.Dir, p.cmd.Stdout, p.cmd.Stderr = dir, logf, logf
	p.cmd.Env = append(os.Environ(), sp.env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // if this harness dies first
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	p.PID = p.cmd.Process.Pid
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.done) }()
	err = waitListening(ctx, addr, p.done, 30*time.Second)
	if err == nil {
		err = r.probe(p)
	}
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("%v\n%s", err, tail(p.log))
	}
	r.peers = append(r.peers, p)
	return p, nil
}

// probe sends one request and opens one tunnel through p, so a proxy that
// refuses the workloads is reported before it is measured.
func (r *runner) probe(p *peer) error {
	t := p.target()
	tr := &http.Transport{DisableKeepAlives: true}
	if p.URL != "" {
		u, _ := url.Parse(p.URL)
		tr.Proxy = http.ProxyURL(u)
	}
	if p.intercepts() {
		c, br, err := dialTLSThrough(r.tls.target(p), r.tls.clientConfig(p))
		if err != nil {
			return fmt.Errorf("intercepted TLS to %s through %s: %w", r.tls.origin.Addr, p.Name, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := getThrough(c, br, r.tls.origin.Addr, "/small", smallBody, make([]byte, 4096)); err != nil {
			return fmt.Errorf("GET /small intercepted by %s: %w", p.Name, err)
		}
		return nil
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + t.Host + "/small")
	if err == nil {
		n, rerr := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		err = wantBody(resp, n, rerr, smallBody)
	}
	if err != nil {
		return fmt.Errorf("GET http://%s/small through %s: %w", t.Host, p.Name, err)
	}
	c, br, err := dialTunnel(t)
	if err != nil {
		return fmt.Errorf("tunnel to %s through %s: %w", t.Host, p.Name, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := getThrough(c, br, t.Host, "/small", smallBody, make([]byte, 4096)); err != nil {
		return fmt.Errorf("GET /small in a tunnel to %s through %s: %w", t.Host, p.Name, err)
	}
	return nil
}

// stop ends the process: SIGTERM, then SIGKILL after a grace period (egret
// drains for seconds after SIGTERM; nothing is in flight here).
func (p *peer) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(500 * time.Millisecond):
	}
	p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has ended (it is of no use then).
func (p *peer) exited() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitListening waits until something accepts connections on addr, the
// process ends (done) or timeout passes.
func waitListening(ctx context.Context, addr string, done <-chan struct{}, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("exited before listening on %s", addr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(end) {
			return fmt.Errorf("nothing listens on %s after %s", addr, timeout)
		}
	}
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// executable checks that path is a program one can run; what names the flag
// or the step that provides it.
func executable(path, what string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s (%s)", err, what)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable (%s)", path, what)
	}
	return nil
}

// output runs a program for its version and returns what it printed.
func (r *runner) output(argv ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	return string(out)
}

// goVersion names a Go program's main module version and toolchain.
func goVersion(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return ""
	}
	return bi.Path + " " + bi.Main.Version + " (" + bi.GoVersion + ")"
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(s)
}

// tail is the end of a log file, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return path + ":\n  " + string(bytes.Join(lines, []byte("\n  ")))
}

// gatewayIntercept configures `egret proxy --role gateway` to intercept
// the TLS origin as interceptd does — the bench's interception CA, the
// origin verified with its CA, a bearer token injected from a file, GET
// and HEAD allowed by a rule — through the whole admission path of the
// gateway (client allow-list, routes, SSRF guard opened for loopback),
// its access log on stdout (a tunnel line and a line per request).
func (r *runner) gatewayIntercept(addr, dir string) (spec, error) {
	if err := executable(r.opt.egret, "-egret; make build"); err != nil {
		return spec{}, err
	}
	conf := filepath.Join(dir, "egret.yaml")
	err := os.WriteFile(conf, []byte(fmt.Sprintf(`role: gateway
gateway:
  client_cidrs: [127.0.0.0/8]
  allow_cidrs: [127.0.0.0/8]
intercept:
  ca_dir: %s
  origin_ca_file: %s
  sites:
    - hosts: [%q]
      credentials:
        - {name: bench/token, files: [%s]}
      http:
        rules:
          - {action: allow, methods: [GET, HEAD], path_prefixes: [/]}
`, r.tls.caDir, r.tls.originCA, r.tls.host, r.tls.token)), 0o644)
	if err != nil {
		return spec{}, err
	}
	return spec{
		argv:    []string{r.opt.egret, "proxy", "--config", conf, "--listen", addr, "--admin-listen", "127.0.0.1:0"},
		config:  "egret proxy --role gateway with an intercept site (the interceptd site), admission and SSRF guard on",
		version: firstLine(r.output(r.opt.egret, "version")),
	}, nil
}

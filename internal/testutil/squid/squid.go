// Package squid starts a real Squid for tests: listening on a loopback port,
// optionally requiring Basic auth, resolving names only from a hosts file
// the test writes (never real DNS), logging every request.
package squid

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

// Options configure a Squid.
type Options struct {
	// User and Password, when User is set, make Squid require Basic auth.
	User, Password string
	// Hosts maps names to addresses for Squid's resolver (hosts_file).
	Hosts map[string]string
	// Listen is the address to listen on; "" means 127.0.0.1 with a free port.
	Listen string
	// Extra is appended to squid.conf.
	Extra string
	// Namespace, when set (a *netns.NS), runs Squid inside that network
	// namespace; Listen is then an address there ("" means 127.0.0.1 with a
	// port free there).
	Namespace Namespace
}

// Namespace is where Squid runs when not in the test's own network
// namespace: a *netns.NS.
type Namespace interface {
	Command(ctx context.Context, argv ...string) *exec.Cmd
	Listen(network, addr string) (net.Listener, error)
	Dial(ctx context.Context, network, addr string) (net.Conn, error)
}

// Squid is a running Squid.
type Squid struct {
	Addr    string // host:port
	dir     string
	cmd     *exec.Cmd
	mu      sync.Mutex
	stopped bool
}

// URL returns the proxy URL with credentials (user:pass@) if given.
func (s *Squid) URL(user, pass string) string {
	if user == "" {
		return "http://" + s.Addr
	}
	return fmt.Sprintf("http://%s:%s@%s", user, pass, s.Addr)
}

// Start runs Squid until the test ends.
func Start(t testing.TB, o Options) *Squid {
	t.Helper()
	bin := testutil.NeedTool(t, "squid")
	dir, err := os.MkdirTemp("", "egret-squid-")
	if err != nil {
		t.Fatal(err)
	}
	// Squid drops privileges to its own user: let it read and write here.
	os.Chmod(dir, 0o777)
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:" + freePort(t, o.Namespace)
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "http_port %s\n", listen)
	if o.User != "" {
		htpasswd := testutil.NeedTool(t, "htpasswd")
		helper := "/usr/lib/squid/basic_ncsa_auth"
		if _, err := os.Stat(helper); err != nil {
			testutil.Missing(t, "squid's basic_ncsa_auth helper is missing")
		}
		pw := filepath.Join(dir, "passwd")
		out, err := exec.Command(htpasswd, "-bc", pw, o.User, o.Password).CombinedOutput()
		if err != nil {
			t.Fatalf("htpasswd: %v: %s", err, out)
		}
		os.Chmod(pw, 0o644)
		fmt.Fprintf(&conf, "auth_param basic program %s %s\n", helper, pw)
		conf.WriteString("auth_param basic children 2 startup=1 idle=1\nauth_param basic realm egret-test\n")
		conf.WriteString("acl authed proxy_auth REQUIRED\nhttp_access allow authed\nhttp_access deny all\n")
	} else {
		conf.WriteString("http_access allow all\n")
	}
	hosts := filepath.Join(dir, "hosts")
	var hb strings.Builder
	for name, addr := range o.Hosts {
		fmt.Fprintf(&hb, "%s %s\n", addr, name)
	}
	if err := os.WriteFile(hosts, []byte(hb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&conf, `hosts_file %[1]s/hosts
# Never real DNS: names come from hosts_file only.
dns_nameservers 127.0.0.1
dns_timeout 2 seconds
negative_dns_ttl 1 seconds
cache deny all
cache_mem 8 MB
access_log stdio:%[1]s/access.log
cache_log %[1]s/cache.log
pid_filename %[1]s/squid.pid
coredump_dir %[1]s
visible_hostname squid-test
shutdown_lifetime 0 seconds
connect_timeout 5 seconds
forwarded_for on
%[2]s
`, dir, o.Extra)
	confPath := filepath.Join(dir, "squid.conf")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-N", "-f", confPath)
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", listen, 200*time.Millisecond) }
	if o.Namespace != nil {
		cmd = o.Namespace.Command(context.Background(), bin, "-N", "-f", confPath)
		dial = func() (net.Conn, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			return o.Namespace.Dial(ctx, "tcp", listen)
		}
	}
	logf, _ := os.Create(filepath.Join(dir, "squid.out"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start squid: %v", err)
	}
	s := &Squid{Addr: listen, dir: dir, cmd: cmd}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			for _, f := range []string{"squid.out", "cache.log", "access.log"} {
				b, _ := os.ReadFile(filepath.Join(dir, f))
				t.Logf("squid %s:\n%s", f, b)
			}
		}
		os.RemoveAll(dir)
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := dial()
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "squid.out"))
			t.Fatalf("squid did not start listening on %s: %s", listen, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// Stop stops Squid; further requests to it are refused.
func (s *Squid) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// AccessLog returns Squid's access log lines so far.
func (s *Squid) AccessLog() []string {
	f, err := os.Open(filepath.Join(s.dir, "access.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// WaitLog waits until an access log line contains substr, and returns it.
func (s *Squid) WaitLog(t testing.TB, substr string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range s.AccessLog() {
			if strings.Contains(l, substr) {
				return l
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("squid access log has no line with %q; it has:\n%s", substr, strings.Join(s.AccessLog(), "\n"))
	return ""
}

func freePort(t testing.TB, ns Namespace) string {
	listen := net.Listen
	if ns != nil {
		listen = ns.Listen
	}
	ln, err := listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

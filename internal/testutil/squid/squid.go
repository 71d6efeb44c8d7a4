// Package squid starts a real Squid for tests: listening on a loopback port,
// optionally requiring Basic, NTLM or Negotiate (Kerberos) auth, resolving
// names only from a hosts file the test writes (never real DNS), logging
// every request.
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
	// Auth, when set, makes Squid require another scheme instead:
	// AuthNTLM (Squid's ntlm_fake_auth helper: any user and password pass a
	// well-formed handshake) or AuthNegotiate (negotiate_kerberos_auth with
	// the service key in Keytab).
	Auth string
	// Keytab is the proxy's keytab (HTTP/host@REALM) for AuthNegotiate.
	Keytab string
	// Env is added to Squid's environment, which its helpers inherit
	// (KRB5_CONFIG, say).
	Env []string
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
	// Bump, when set, makes Squid a corporate proxy that intercepts TLS:
	// Debian's squid-openssl (scripts/deps/33-squid-openssl.sh) ssl-bumps
	// every CONNECT with leaves signed by the CA.
	Bump *Bump
}

// Bump is the ssl-bump of a Squid: its CA and the CAs it verifies origins
// with.
type Bump struct {
	CACert, CAKey []byte // PEM; the CA that signs the leaves clients see
	OriginCAFile  string // PEM CAs origins are verified with; "" = the system's
}

// OpenSSLBinary is the squid of Debian's squid-openssl, unpacked by
// scripts/deps/33-squid-openssl.sh (testutil.Missing when it is not).
func OpenSSLBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(testutil.CacheDir(), "bench", "squid-openssl", "usr", "sbin", "squid")
	if _, err := os.Stat(bin); err != nil {
		testutil.Missing(t, "squid-openssl is not unpacked at "+bin+" (scripts/deps/33-squid-openssl.sh)")
	}
	return bin
}

// bumpConf writes what ssl-bump needs into dir (Squid's user must read it)
// and returns the http_port options and the configuration lines.
func bumpConf(t testing.TB, bin, dir string, b *Bump) (port, conf string) {
	t.Helper()
	root := filepath.Dir(filepath.Dir(filepath.Dir(bin))) // .../usr/sbin/squid
	src, err := os.ReadFile(filepath.Join(root, "usr", "lib", "squid", "security_file_certgen"))
	if err != nil {
		testutil.Missing(t, "squid-openssl's security_file_certgen: "+err.Error()+" (scripts/deps/33-squid-openssl.sh)")
	}
	// Squid runs its helpers as its own user ("proxy"), which may not
	// reach the cache under root's home: a copy here.
	certgen := filepath.Join(dir, "security_file_certgen")
	if err := os.WriteFile(certgen, src, 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "ssl_db")
	if out, err := exec.Command(certgen, "-c", "-s", db, "-M", "4MB").CombinedOutput(); err != nil {
		t.Fatalf("%s -c: %v\n%s", certgen, err, out)
	}
	filepath.WalkDir(db, func(p string, _ os.DirEntry, _ error) error { os.Chmod(p, 0o777); return nil })
	// Squid reads the CA as one file, the certificate and the key.
	ca := filepath.Join(dir, "bump-ca.pem")
	if err := os.WriteFile(ca, append(append([]byte{}, b.CACert...), b.CAKey...), 0o644); err != nil {
		t.Fatal(err)
	}
	port = " ssl-bump tls-cert=" + ca + " generate-host-certificates=on dynamic_cert_mem_cache_size=4MB"
	conf = "sslcrtd_program " + certgen + " -s " + db + " -M 4MB\nsslcrtd_children 2 startup=1 idle=1\n" +
		"acl step1 at_step SslBump1\nssl_bump peek step1\nssl_bump bump all\n"
	if b.OriginCAFile != "" {
		origin := filepath.Join(dir, "origin-ca.pem")
		pem, err := os.ReadFile(b.OriginCAFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(origin, pem, 0o644); err != nil {
			t.Fatal(err)
		}
		conf += "tls_outgoing_options cafile=" + origin + "\n"
	}
	return port, conf
}

// Namespace is where Squid runs when not in the test's own network
// namespace: a *netns.NS.
type Namespace interface {
	Command(ctx context.Context, argv ...string) *exec.Cmd
	Listen(network, addr string) (net.Listener, error)
	Dial(ctx context.Context, network, addr string) (net.Conn, error)
}

// Schemes for Options.Auth.
const (
	AuthNTLM      = "ntlm"
	AuthNegotiate = "negotiate"
)

// Squid is a running Squid.
type Squid struct {
	Addr    string // host:port
	dir     string
	cmd     *exec.Cmd
	mu      sync.Mutex
	stopped bool
}

// Start runs Squid until the test ends.
func Start(t testing.TB, o Options) *Squid {
	t.Helper()
	var bin string
	if o.Bump != nil {
		bin = OpenSSLBinary(t)
	} else {
		bin = testutil.NeedTool(t, "squid")
	}
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
	if o.Bump != nil {
		port, bump := bumpConf(t, bin, dir, o.Bump)
		fmt.Fprintf(&conf, "http_port %s%s\n%s", listen, port, bump)
	} else {
		fmt.Fprintf(&conf, "http_port %s\n", listen)
	}
	switch {
	case o.Auth == AuthNTLM:
		helper := "/usr/lib/squid/ntlm_fake_auth"
		if _, err := os.Stat(helper); err != nil {
			testutil.Missing(t, "squid's ntlm_fake_auth helper is missing")
		}
		fmt.Fprintf(&conf, "auth_param ntlm program %s\nauth_param ntlm children 2 startup=1 idle=1\nauth_param ntlm keep_alive on\n", helper)
		conf.WriteString("acl authed proxy_auth REQUIRED\nhttp_access allow authed\nhttp_access deny all\n")
	case o.Auth == AuthNegotiate:
		helper := "/usr/lib/squid/negotiate_kerberos_auth"
		if _, err := os.Stat(helper); err != nil {
			testutil.Missing(t, "squid's negotiate_kerberos_auth helper is missing")
		}
		// Any principal of the keytab: the test names the SPN egret asks for.
		fmt.Fprintf(&conf, "auth_param negotiate program %s -k %s -s GSS_C_NO_NAME -t none\nauth_param negotiate children 2 startup=1 idle=1\nauth_param negotiate keep_alive on\n", helper, o.Keytab)
		conf.WriteString("acl authed proxy_auth REQUIRED\nhttp_access allow authed\nhttp_access deny all\n")
	case o.User != "":
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
	default:
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
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
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
	p, err := testutil.PickPort(testutil.ListenCheck(listen, "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// SetPassword changes (or adds) a user's password in Squid's password file,
// the way an operator rotates a credential at the provider. Squid's helper
// re-reads the file when it changes; Squid itself caches a validated
// credential for auth_param basic credentialsttl (set it low with Extra).
func (s *Squid) SetPassword(t testing.TB, user, password string) {
	t.Helper()
	htpasswd := testutil.NeedTool(t, "htpasswd")
	pw := filepath.Join(s.dir, "passwd")
	// The helper notices a change by mtime (one-second resolution): make
	// sure the new file's mtime differs.
	if st, err := os.Stat(pw); err == nil && time.Since(st.ModTime()) < time.Second {
		time.Sleep(time.Second - time.Since(st.ModTime()) + 10*time.Millisecond)
	}
	if out, err := exec.Command(htpasswd, "-b", pw, user, password).CombinedOutput(); err != nil {
		t.Fatalf("htpasswd: %v: %s", err, out)
	}
	os.Chmod(pw, 0o644)
}

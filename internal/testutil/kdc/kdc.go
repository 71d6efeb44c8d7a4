// Package kdc starts a real MIT Kerberos KDC for tests: a realm created in
// a temporary directory (database, stash, principals, keytabs), krb5kdc
// listening on a free loopback port, optionally with its clock set off by
// libfaketime.
package kdc

import (
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

// DefaultRealm is the realm Start creates when Options.Realm is empty.
const DefaultRealm = "EGRET.TEST"

// Options configure a KDC.
type Options struct {
	// Realm is the realm's name; "" means DefaultRealm.
	Realm string
	// ClockOffset, when set, runs krb5kdc with its clock this far from the
	// real one (libfaketime), for clock-skew tests.
	ClockOffset time.Duration
}

// KDC is a running krb5kdc and its realm.
type KDC struct {
	Realm string
	Addr  string // 127.0.0.1:port, TCP and UDP
	Dir   string
	env   []string
	cmd   *exec.Cmd
	mu    sync.Mutex
	done  bool
}

// Start creates the realm and runs krb5kdc until the test ends.
func Start(t testing.TB, o Options) *KDC {
	t.Helper()
	kdb := testutil.NeedTool(t, "kdb5_util")
	kdcBin := testutil.NeedTool(t, "krb5kdc")
	testutil.NeedTool(t, "kadmin.local")
	realm := o.Realm
	if realm == "" {
		realm = DefaultRealm
	}
	dir, err := os.MkdirTemp("", "egret-kdc-")
	if err != nil {
		t.Fatal(err)
	}
	// Squid's helper, running as Squid's user, reads keytabs from here.
	os.Chmod(dir, 0o755)
	port := freePort(t)
	k := &KDC{Realm: realm, Addr: "127.0.0.1:" + port, Dir: dir}
	kdcConf := fmt.Sprintf(`[kdcdefaults]
 kdc_ports = %[2]s
 kdc_tcp_ports = %[2]s
[realms]
 %[3]s = {
  database_name = %[1]s/principal
  key_stash_file = %[1]s/stash
  acl_file = %[1]s/kadm5.acl
  max_life = 10h 0m 0s
  max_renewable_life = 1d 0h 0m 0s
  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
 }
[logging]
 kdc = FILE:%[1]s/kdc.log
`, dir, port, realm)
	write(t, filepath.Join(dir, "kdc.conf"), kdcConf)
	write(t, filepath.Join(dir, "kadm5.acl"), "")
	write(t, filepath.Join(dir, "krb5.conf"), k.Krb5Conf())
	k.env = append(os.Environ(),
		"KRB5_CONFIG="+filepath.Join(dir, "krb5.conf"),
		"KRB5_KDC_PROFILE="+filepath.Join(dir, "kdc.conf"),
		"KRB5RCACHETYPE=none")
	k.run(t, kdb, "-r", realm, "create", "-s", "-P", "egret-test-master")

	cmd := exec.Command(kdcBin, "-n", "-r", realm)
	cmd.Env = k.env
	if o.ClockOffset != 0 {
		// libfaketime in krb5kdc itself (the faketime program would stand
		// between the test and the process it must kill).
		libs, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
		if len(libs) == 0 {
			testutil.Missing(t, "libfaketime is not installed (scripts/deps/41-kerberos.sh installs it)")
		}
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+libs[0], fmt.Sprintf("FAKETIME=%+ds", int(o.ClockOffset.Seconds())))
	}
	logf, _ := os.Create(filepath.Join(dir, "krb5kdc.out"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start krb5kdc: %v", err)
	}
	k.cmd = cmd
	t.Cleanup(func() {
		k.Stop()
		if t.Failed() {
			for _, f := range []string{"krb5kdc.out", "kdc.log"} {
				b, _ := os.ReadFile(filepath.Join(dir, f))
				t.Logf("kdc %s:\n%s", f, b)
			}
		}
		os.RemoveAll(dir)
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", k.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "krb5kdc.out"))
			t.Fatalf("krb5kdc did not listen on %s: %s", k.Addr, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return k
}

// Krb5Conf is a krb5.conf for clients of the realm: this KDC over TCP,
// no DNS.
func (k *KDC) Krb5Conf() string {
	return fmt.Sprintf(`[libdefaults]
 default_realm = %[1]s
 dns_lookup_kdc = false
 dns_lookup_realm = false
 rdns = false
 udp_preference_limit = 1
[realms]
 %[1]s = {
  kdc = %[2]s
 }
`, k.Realm, k.Addr)
}

// Env is the environment for MIT tools and Squid's helper to use this
// realm (KRB5_CONFIG, no replay cache).
func (k *KDC) Env() []string {
	return []string{"KRB5_CONFIG=" + filepath.Join(k.Dir, "krb5.conf"), "KRB5RCACHETYPE=none"}
}

// AddUser adds a principal with a password that requires
// pre-authentication (so a wrong password is the KDC's
// KDC_ERR_PREAUTH_FAILED).
func (k *KDC) AddUser(t testing.TB, name, password string) {
	t.Helper()
	k.kadmin(t, fmt.Sprintf("addprinc -pw %s +requires_preauth %s", password, name))
}

// AddKeytab adds a principal with a random key (a service such as
// HTTP/proxy.test, or a user that logs in with a keytab) and writes its
// keys to a keytab file, whose path it returns (readable by every user).
func (k *KDC) AddKeytab(t testing.TB, name string) string {
	t.Helper()
	k.kadmin(t, "addprinc -randkey +requires_preauth "+name)
	path := filepath.Join(k.Dir, strings.NewReplacer("/", "_", "@", "_").Replace(name)+".keytab")
	k.kadmin(t, fmt.Sprintf("ktadd -k %s %s", path, name))
	os.Chmod(path, 0o644)
	return path
}

func (k *KDC) kadmin(t testing.TB, query string) {
	t.Helper()
	k.run(t, "kadmin.local", "-r", k.Realm, "-q", query)
}

func (k *KDC) run(t testing.TB, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = k.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", bin, strings.Join(args, " "), err, out)
	}
}

// Stop stops krb5kdc: the realm has no KDC any more.
func (k *KDC) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return
	}
	k.done = true
	k.cmd.Process.Kill()
	k.cmd.Wait()
}

func write(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func freePort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

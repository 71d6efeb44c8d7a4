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
	Realm  string
	Addr   string // 127.0.0.1:port, TCP and UDP
	Dir    string
	env    []string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	mu     sync.Mutex
	done   bool
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
	k := &KDC{Realm: realm, Dir: dir}
	k.env = append(os.Environ(),
		"KRB5_CONFIG="+filepath.Join(dir, "krb5.conf"),
		"KRB5_KDC_PROFILE="+filepath.Join(dir, "kdc.conf"),
		"KRB5RCACHETYPE=none")
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
	// krb5kdc binds its port on every address, TCP and UDP: a port free
	// when chosen may be taken by then (other test binaries run beside
	// this one), so a start that finds it in use is tried on another.
	for attempt := 1; ; attempt++ {
		port := freePort(t)
		k.Addr = "127.0.0.1:" + port
		k.writeConf(t, port)
		if attempt == 1 {
			k.run(t, kdb, "-r", realm, "create", "-s", "-P", "egret-test-master")
		}
		err := k.start(t, kdcBin, o)
		if err == nil {
			return k
		}
		b, _ := os.ReadFile(filepath.Join(dir, "kdc.log"))
		if attempt == 5 || !strings.Contains(string(b), "Address already in use") {
			out, _ := os.ReadFile(filepath.Join(dir, "krb5kdc.out"))
			t.Fatalf("krb5kdc did not listen on %s: %v %s", k.Addr, err, out)
		}
		os.Remove(filepath.Join(dir, "kdc.log"))
	}
}

// writeConf writes the KDC's and the clients' configuration for port.
func (k *KDC) writeConf(t testing.TB, port string) {
	t.Helper()
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
`, k.Dir, port, k.Realm)
	write(t, filepath.Join(k.Dir, "kdc.conf"), kdcConf)
	write(t, filepath.Join(k.Dir, "kadm5.acl"), "")
	write(t, filepath.Join(k.Dir, "krb5.conf"), k.Krb5Conf())
}

// start runs krb5kdc and waits until it listens on k.Addr; an error when
// it exits first or does not listen within 15 s (it is then stopped).
func (k *KDC) start(t testing.TB, kdcBin string, o Options) error {
	t.Helper()
	cmd := exec.Command(kdcBin, "-n", "-r", k.Realm)
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
	logf, _ := os.Create(filepath.Join(k.Dir, "krb5kdc.out"))
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start krb5kdc: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	k.mu.Lock()
	k.cmd, k.exited, k.done = cmd, exited, false
	k.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", k.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			k.Stop()
			return fmt.Errorf("krb5kdc exited")
		default:
		}
		if time.Now().After(deadline) {
			k.Stop()
			return fmt.Errorf("not listening after 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
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
	if k.cmd == nil {
		return
	}
	k.cmd.Process.Kill()
	<-k.exited
}

func write(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a port free on every address for TCP and UDP, as
// krb5kdc binds it.
func freePort(t testing.TB) string {
	p, err := testutil.PickPort(func(p string) error {
		ln, err := net.Listen("tcp", ":"+p)
		if err != nil {
			return err
		}
		defer ln.Close()
		u, err := net.ListenPacket("udp", ":"+p)
		if err != nil {
			return err
		}
		return u.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

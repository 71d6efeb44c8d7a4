package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/squid"
	"egret.io/egret/internal/upstream"
)

// tr is the transport the tests dial members with.
var tr = New(nil, nil)

func members(t testing.TB, specs ...string) []*upstream.Member {
	t.Helper()
	var out []*upstream.Member
	for _, s := range specs {
		m, err := upstream.ParseMemberSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, upstream.NewMember(m))
	}
	return out
}

const (
	user = "egret"
	pass = "p@ss:w/rd"
	enc  = "p%40ss%3Aw%2Frd"
)

// echoOrigin answers every connection with "hello\n".
func echoOrigin(t *testing.T) string {
	t.Helper()
	addr := testutil.TCPServer(t, func(c net.Conn) { io.WriteString(c, "hello\n") })
	_, port, _ := net.SplitHostPort(addr)
	return port
}

func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func readHello(t *testing.T, tun *Tunnel) {
	t.Helper()
	tun.SetDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(tun)
	tun.Close()
	if string(append(tun.Prefix, b...)) != "hello\n" {
		t.Fatalf("tunnel gave %q", b)
	}
}

type eventLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *eventLog) add(s string) { l.mu.Lock(); l.lines = append(l.lines, s); l.mu.Unlock() }
func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *eventLog) events() *upstream.Events {
	return &upstream.Events{
		Down: func(pool string, m *upstream.Member, d time.Duration, err error) {
			l.add("down " + m.Name + " " + string(proxystatus.From(err).Type))
		},
		Up:       func(pool string, m *upstream.Member, how string) { l.add("up " + m.Name + " " + how) },
		Fallback: func(pool string, m *upstream.Member) { l.add("fallback " + m.Name) },
	}
}

// TestPoolFailoverRealSquids: a member answering 407 (wrong password), a
// member that is not running and a healthy one serve every tunnel; the two
// bad ones are marked down and skipped afterwards.
func TestPoolFailoverRealSquids(t *testing.T) {
	port := echoOrigin(t)
	hosts := map[string]string{"partner.test": "127.0.0.1"}
	bad := squid.Start(t, squid.Options{User: user, Password: "other", Hosts: hosts})
	good := squid.Start(t, squid.Options{User: user, Password: pass, Hosts: hosts})
	var ev eventLog
	dead := deadAddr(t)
	p := &upstream.Pool{Name: "p", Events: ev.events(), Backoff: upstream.Backoff{Initial: time.Minute},
		Members: members(t, "http://"+user+":"+enc+"@"+bad.Addr, "http://"+dead, "http://"+user+":"+enc+"@"+good.Addr)}
	for i := 0; i < 12; i++ {
		tun, err := tr.DialTunnel(context.Background(), p, "partner.test:"+port)
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		if tun.Member.Name != "http://"+good.Addr {
			t.Fatalf("tunnel %d through %s", i, tun.Member.Name)
		}
		readHello(t, tun)
	}
	log := ev.String()
	for _, want := range []string{"down http://" + bad.Addr + " upstream_auth_required", "down http://" + dead + " connection_refused"} {
		if strings.Count(log, want) != 1 {
			t.Errorf("events lack exactly one %q:\n%s", want, log)
		}
	}
	if n := strings.Count(strings.Join(bad.AccessLog(), "\n"), "TCP_DENIED/407"); n != 1 {
		t.Errorf("the member with the wrong password saw %d attempts, want 1 (then back-off)", n)
	}
	// Everyone down: the pool is unavailable, nothing goes direct.
	good.Stop()
	_, err := tr.DialTunnel(context.Background(), p, "partner.test:"+port)
	if pe := proxystatus.From(err); pe.Type != proxystatus.ConnectionRefused || pe.Upstream != "http://"+good.Addr {
		t.Fatalf("last member dead: %v", err)
	}
	// All members down: the one due back first is still tried (its real
	// error comes back); nothing goes direct.
	_, err = tr.DialTunnel(context.Background(), p, "partner.test:"+port)
	if pe := proxystatus.From(err); pe.Upstream == "" || pe.Type == proxystatus.PoolUnavailable {
		t.Fatalf("all members down, last resort: %v", err)
	}
	// When that member's last failure was a timeout, the pool fails fast.
	for _, m := range p.Current() {
		m.MarkDown(time.Now(), p.Backoff, "connection_timeout via "+m.Name)
	}
	_, err = tr.DialTunnel(context.Background(), p, "partner.test:"+port)
	if pe := proxystatus.From(err); pe.Type != proxystatus.PoolUnavailable || pe.Code() != 503 {
		t.Fatalf("all members down: %v", err)
	}
}

// TestCredentialFallbackRealSquid rotates the shared credential to a
// password Squid does not accept yet: tunnels keep working through the
// previous one; once Squid accepts the new password it is confirmed and the
// previous one retired.
func TestCredentialFallbackRealSquid(t *testing.T) {
	port := echoOrigin(t)
	sq := squid.Start(t, squid.Options{User: user, Password: "old-pw", Hosts: map[string]string{"partner.test": "127.0.0.1"},
		Extra: "auth_param basic credentialsttl 1 second"})
	store := credentials.NewStore(credentials.New(user, "old-pw"))
	var retired int
	store.OnRetire(func() { retired++ })
	var ev eventLog
	p := &upstream.Pool{Name: "p", Credentials: store, Events: ev.events(), Members: members(t, "http://"+sq.Addr)}
	dial := func() {
		t.Helper()
		tun, err := tr.DialTunnel(context.Background(), p, "partner.test:"+port)
		if err != nil {
			t.Fatalf("tunnel: %v\n%s", err, ev.String())
		}
		readHello(t, tun)
	}
	dial()
	store.Set(credentials.New(user, "new-pw"))
	for i := 0; i < 3; i++ {
		dial()
	}
	if n := strings.Count(ev.String(), "fallback"); n != 3 {
		t.Errorf("%d fallbacks, want 3:\n%s", n, ev.String())
	}
	if strings.Contains(ev.String(), "down") {
		t.Errorf("a 407 answered to the new credential marked the member down:\n%s", ev.String())
	}
	sq.SetPassword(t, user, "new-pw")
	time.Sleep(1100 * time.Millisecond) // Squid's credentialsttl
	dial()
	if store.Rotating() || retired != 1 {
		t.Errorf("after the new password worked: rotating %v, retired %d", store.Rotating(), retired)
	}
	// The old password is gone for good.
	store.Set(credentials.New(user, "old-pw"))
	store.Set(credentials.New(user, "new-pw"))
	if fb := store.Fallback(); fb == nil || fb.Password != "old-pw" {
		// (setting back and forth keeps the last known good as fallback)
		t.Logf("fallback %v", fb)
	}
}

// TestHTTPSMember reaches a real Squid through TLS (a terminator in front of
// it with a certificate from a private CA) and checks the CA setting.
func TestHTTPSMember(t *testing.T) {
	port := echoOrigin(t)
	sq := squid.Start(t, squid.Options{User: user, Password: pass, Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	ca, certPEMPool, tlsAddr := tlsFront(t, sq.Addr)
	_ = certPEMPool
	m := members(t, "https://"+user+":"+enc+"@"+tlsAddr)[0]
	p := &upstream.Pool{Name: "tls", Members: []*upstream.Member{m}, TLSConfig: &tls.Config{RootCAs: ca, ServerName: "proxy.test"}}
	tun, err := tr.DialTunnel(context.Background(), p, "partner.test:"+port)
	if err != nil {
		t.Fatal(err)
	}
	readHello(t, tun)
	if _, ok := tun.Conn.(*tls.Conn); !ok {
		t.Errorf("tunnel is a %T, want TLS", tun.Conn)
	}
	// Without the CA the certificate is refused and the member blamed.
	p2 := &upstream.Pool{Name: "tls", Members: members(t, "https://"+tlsAddr), TLSConfig: &tls.Config{ServerName: "proxy.test"}}
	_, err = tr.DialTunnel(context.Background(), p2, "partner.test:"+port)
	if pe := proxystatus.From(err); pe.Type != proxystatus.TLSCertificateError {
		t.Fatalf("unknown CA: %v", err)
	}
	if p2.Current()[0].Healthy(time.Now()) {
		t.Error("a member with a bad certificate stays healthy")
	}
}

// TestSOCKS5Member reaches an origin through a real SOCKS5 server
// (microsocks) with username/password authentication; a wrong password is
// the member's fault.
func TestSOCKS5Member(t *testing.T) {
	bin := testutil.NeedTool(t, "microsocks")
	port := echoOrigin(t)
	addr := deadAddr(t)
	host, sport, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "-i", host, "-p", sport, "-u", user, "-P", "sockspw")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitListen(t, addr)
	p := &upstream.Pool{Name: "s", Members: members(t, "socks5://"+user+":sockspw@"+addr)}
	// microsocks resolves names itself (real DNS): use an IP literal.
	tun, err := tr.DialTunnel(context.Background(), p, "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	readHello(t, tun)
	bad := &upstream.Pool{Name: "s", Members: members(t, "socks5://"+user+":wrong@"+addr)}
	_, err = tr.DialTunnel(context.Background(), bad, "127.0.0.1:"+port)
	if err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong SOCKS password: %v", err)
	}
	if member, _ := upstream.Fault(err); !member {
		t.Errorf("a refused SOCKS login is not the member's fault: %v", err)
	}
}

// TestProbeBringsMemberBack: a member marked down for a long back-off is
// brought back by a probe as soon as it answers again.
func TestProbeBringsMemberBack(t *testing.T) {
	port := echoOrigin(t)
	sq := squid.Start(t, squid.Options{Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	var ev eventLog
	p := &upstream.Pool{Name: "p", Events: ev.events(), Members: members(t, "http://"+sq.Addr, "http://"+deadAddr(t))}
	a, dead := p.Current()[0], p.Current()[1]
	a.MarkDown(time.Now(), upstream.Backoff{Initial: time.Hour}, "test")
	pr := upstream.Probe{Target: "partner.test:" + port, Timeout: 2 * time.Second}
	p.ProbeOnce(context.Background(), pr, tr.Opener(p))
	if !a.Healthy(time.Now()) || dead.Healthy(time.Now()) {
		t.Fatalf("after a probe: squid healthy %v, dead member healthy %v", a.Healthy(time.Now()), dead.Healthy(time.Now()))
	}
	if st := a.State(time.Now()); !st.ProbeOK || st.ProbedAt.IsZero() {
		t.Errorf("probe not recorded: %+v", st)
	}
	if !strings.Contains(ev.String(), "up http://"+sq.Addr+" probe") {
		t.Errorf("events:\n%s", ev.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.RunProbes(ctx, upstream.Probe{Target: pr.Target, Interval: 20 * time.Millisecond, Timeout: time.Second}, tr.Opener(p))
		close(done)
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("RunProbes did not stop")
	}
}

func waitListen(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tlsFront terminates TLS (certificate for proxy.test from a new CA) and
// passes the bytes to backend. It returns the CA pool, the CA in PEM and
// the address.
func tlsFront(t *testing.T, backend string) (*x509.CertPool, []byte, string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egret test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "proxy.test"}, DNSNames: []string{"proxy.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Serve(t, ln, func(c net.Conn) {
		b, err := net.Dial("tcp", backend)
		if err != nil {
			return
		}
		defer b.Close()
		go io.Copy(b, c)
		io.Copy(c, b)
	})
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, caDER, ln.Addr().String()
}

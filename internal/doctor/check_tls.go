package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"strings"

	"egret.io/egret/internal/trust"
)

// tlsRuntimes maps the executables on PATH to trust models (Go is always
// there: egret itself, and the usual Go binaries).
var tlsRuntimes = []struct {
	exe      []string
	runtimes []string
}{
	{[]string{"curl"}, []string{"curl"}},
	{[]string{"python3", "python"}, []string{"python-requests", "python-ssl"}},
	{[]string{"node"}, []string{"node"}},
	{[]string{"java"}, []string{"java"}},
	{[]string{"ruby"}, []string{"ruby"}},
	{[]string{"git"}, []string{"git"}},
	{[]string{"aws"}, []string{"aws-cli"}},
	{[]string{"dotnet"}, []string{"dotnet"}},
}

// tlsTargets are the https URLs the tls check connects to: --tls, else
// the echo URL when it is https.
func (s *state) tlsTargets() []*url.URL {
	var out []*url.URL
	for _, raw := range s.o.TLS {
		if u, err := url.Parse(raw); err == nil && u.Scheme == "https" && u.Hostname() != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 && s.echo != nil && s.echo.Scheme == "https" {
		out = append(out, s.echo)
	}
	return out
}

// tlsChecks connect to each TLS target through the proxy https clients
// use, show the issuer the connection presents (intercepted or not) and say,
// per runtime in the image, whether it will trust it.
func (s *state) tlsChecks() []Check {
	// Without an https URL there is nothing to judge, and no check.
	var out []Check
	for _, u := range s.tlsTargets() {
		out = append(out, Check{Name: "tls", Target: u.String(), Run: func(ctx context.Context) Result { return s.tlsResult(ctx, u) }})
	}
	return out
}

func (s *state) tlsResult(ctx context.Context, u *url.URL) Result {
	hostport := hostPortOf(u)
	var conn net.Conn
	via := "directly"
	if ps := s.proxies("https"); len(ps) > 0 && ps[0].url != nil {
		p := ps[0]
		via = "through " + p.name()
		c, br, a, f := s.connectVia(ctx, p.url, hostport)
		if f != nil {
			return Result{Status: Fail, Summary: fmt.Sprintf("CONNECT %s %s failed: %s", hostport, via, f.what()),
				Advice: "See the proxy check: the tunnel must work before its certificate can be judged."}
		}
		if a != nil && a.code/100 != 2 {
			return Result{Status: Fail, Summary: fmt.Sprintf("%s answered %s to CONNECT %s", p.name(), a.status, hostport),
				Advice: "See the proxy check for what this answer means."}
		}
		conn = &prefixConn{Conn: c, r: br}
	} else {
		c, _, f := s.dialHost(ctx, u.Hostname(), uint16Port(portOf(u)))
		if f != nil {
			return Result{Status: Fail, Summary: fmt.Sprintf("connect %s: %s", hostport, f.what())}
		}
		conn = c
	}
	defer conn.Close()
	s.deadline(ctx, conn)
	// Only look at the chain here; each runtime's verdict comes below.
	tc := tls.Client(conn, &tls.Config{ServerName: u.Hostname(), InsecureSkipVerify: true}) //nolint:gosec // the chain is verified per runtime below
	if err := tc.HandshakeContext(ctx); err != nil {
		return Result{Status: Fail, Summary: fmt.Sprintf("TLS handshake with %s %s failed: %s", hostport, via, shortErr(err))}
	}
	chain := tc.ConnectionState().PeerCertificates
	if len(chain) == 0 {
		return Result{Status: Fail, Summary: "the server sent no certificate"}
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	opts := func(roots *x509.CertPool) x509.VerifyOptions {
		return x509.VerifyOptions{DNSName: u.Hostname(), Roots: roots, Intermediates: inter}
	}
	r := Result{}
	issuer := trust.Name(chain[len(chain)-1])
	if len(chain) == 1 {
		issuer = oneLineName(leaf.Issuer.CommonName, leaf.Issuer.String())
	}
	sys, sysFile, sysErr := s.systemRoots()
	intercepted := true
	if sysErr == nil {
		pool := x509.NewCertPool()
		for _, c := range sys {
			pool.AddCert(c)
		}
		if _, err := leaf.Verify(opts(pool)); err == nil {
			intercepted = false
		}
	}
	what := "intercepted: the chain does not verify with the image's system roots (" + orDefault(sysFile, "none found") + "), as a TLS-inspecting proxy's does not"
	if !intercepted {
		what = "not intercepted: the chain verifies with the image's system roots"
	}
	r.Details = append(r.Details, fmt.Sprintf("%s %s presents %s, issued by %s — %s", hostport, via, trust.Name(leaf), issuer, what))

	var distrust, trusting []string
	for _, name := range s.tlsRuntimeNames() {
		rt, _ := trust.RuntimeByName(name)
		pool, how, err := s.runtimePool(rt, sys)
		if err != nil {
			distrust = append(distrust, name)
			r.Details = append(r.Details, fmt.Sprintf("%s: cannot tell — %v", name, err))
			continue
		}
		if _, err := leaf.Verify(opts(pool)); err != nil {
			distrust = append(distrust, name)
			r.Details = append(r.Details, fmt.Sprintf("%s: will NOT trust it — %s", name, how))
			continue
		}
		trusting = append(trusting, name)
		r.Details = append(r.Details, fmt.Sprintf("%s: trusts it — %s", name, how))
	}
	state := "not intercepted"
	if intercepted {
		state = "intercepted by " + issuer
	}
	if len(distrust) == 0 {
		r.Status = Pass
		r.Summary = fmt.Sprintf("%s (%s): %s trust it", hostport, state, joinAnd(trusting))
		return r
	}
	r.Status = Fail
	r.Summary = fmt.Sprintf("%s (%s): %s will not trust it", hostport, state, joinAnd(distrust))
	if intercepted {
		r.Advice = "Give these runtimes the system roots plus the corporate CA (" + issuer + "): egret's webhook mounts one bundle and sets each runtime's variable (--ca-configmap; docs/trust.md), or set " +
			s.fixFor(distrust) + " yourself."
	} else {
		r.Advice = "The certificate is not the proxy's: check the name, the clock and the server's chain; a runtime that replaces its roots with a corporate-only file (" + s.fixFor(distrust) + ") also fails here."
	}
	return r
}

// tlsRuntimeNames are the trust models of Go plus the runtimes on PATH.
func (s *state) tlsRuntimeNames() []string {
	names := []string{"go"}
	for _, tr := range tlsRuntimes {
		for _, exe := range tr.exe {
			if _, err := s.d.LookPath(exe); err == nil {
				names = append(names, tr.runtimes...)
				break
			}
		}
	}
	return names
}

func (s *state) fixFor(names []string) string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		if r, ok := trust.RuntimeByName(n); ok {
			if v := r.Settings[0].String(); !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return joinAnd(out)
}

// runtimePool builds the roots r would verify with in this environment:
// the file its setting names (the PKCS#12 store for the JVM), plus the
// system roots when it keeps them (no setting, a setting that adds, or a
// default directory still read).
func (s *state) runtimePool(r trust.Runtime, sys []*x509.Certificate) (*x509.CertPool, string, error) {
	ch := trust.Resolve(r, s.env, s.javaWords()...)
	pool := x509.NewCertPool()
	if !ch.Custom() || ch.Setting.KeepsDefaults() {
		if len(sys) == 0 && (r.Name != "node" && r.Name != "java") {
			return nil, "", errors.New("no system CA bundle found in this image")
		}
		for _, c := range sys {
			pool.AddCert(c)
		}
	}
	if !ch.Custom() {
		how := ch.Reason
		if r.Name == "java" {
			how += " (judged with the system roots; the JDK's cacerts is usually built from them)"
		}
		if r.Name == "node" {
			how += " (judged with the system roots, which Node's own roots resemble)"
		}
		return pool, how, nil
	}
	var certs []*x509.Certificate
	var err error
	if ch.Setting.Kind == trust.JavaProperty {
		props := trust.JavaProps(s.env, s.javaWords()...)
		pw, ok := props["javax.net.ssl.trustStorePassword"]
		if !ok {
			pw = trust.TrustStorePassword
		}
		var data []byte
		if data, err = os.ReadFile(s.appFile(ch.Path)); err == nil {
			certs, err = trust.ReadTrustStore(data, pw)
		}
	} else {
		var data []byte
		if data, err = os.ReadFile(s.appFile(path.Clean(ch.Path))); err == nil {
			certs, err = trust.ParsePEM(data)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %v", ch.Reason, err)
	}
	for _, c := range certs {
		pool.AddCert(c)
	}
	how := fmt.Sprintf("%s, %d certificates", ch.Reason, len(certs))
	if ch.Setting.Effect == trust.Replaces && ch.Setting.Dir != "" {
		how += "; " + ch.Setting.Dir + " still read"
	}
	return pool, how, nil
}

// javaWords are JVM options the doctor sees beyond the variables: none (the
// JVM's command line is the application's, not the shell's).
func (s *state) javaWords() []string { return nil }

func uint16Port(p string) uint16 {
	var n uint16
	for _, c := range p {
		if c < '0' || c > '9' {
			return 443
		}
		n = n*10 + uint16(c-'0')
	}
	return n
}

func oneLineName(cn, full string) string {
	if cn != "" {
		return strings.TrimSpace(cn)
	}
	return strings.TrimSpace(full)
}

// systemRoots reads the image's system CA bundle (in the application's
// root when a process was adopted).
func (s *state) systemRoots() ([]*x509.Certificate, string, error) {
	if s.d.Root == "/" || s.d.Root == "" {
		return trust.SystemRoots()
	}
	files := make([]string, len(trust.SystemBundles))
	for i, f := range trust.SystemBundles {
		files[i] = s.appFile(f)
	}
	certs, f, err := trust.SystemRoots(files...)
	return certs, strings.TrimPrefix(f, s.d.Root), err
}

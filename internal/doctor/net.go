package doctor

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"egret.io/egret/internal/echo"
)

// failKind classifies a network failure by what it means for egress.
type failKind int

const (
	fkNotFound    failKind = iota + 1 // DNS: the name does not exist
	fkDNSTimeout                      // DNS: no answer
	fkDNS                             // DNS: another failure (SERVFAIL, refused)
	fkRefused                         // TCP RST to the SYN: nothing listens, or REJECT
	fkTimeout                         // no answer: dropped on the way
	fkUnreachable                     // no route, host or network unreachable
	fkReset                           // closed or reset after connecting
	fkTLS                             // TLS handshake or certificate
	fkProtocol                        // not the HTTP answer expected
	fkUnsupported                     // the doctor cannot test this (socks5 proxy)
	fkOther
)

// failure is a network step that did not work.
type failure struct {
	kind  failKind
	stage string // what was being done: "connect to 10.0.0.1:3128"
	err   error
}

func (f *failure) Error() string {
	if f.err == nil {
		return f.stage
	}
	return f.stage + ": " + shortErr(f.err)
}

// what says in a few words what the failure kind means.
func (f *failure) what() string {
	switch f.kind {
	case fkNotFound:
		return "the name does not resolve"
	case fkDNSTimeout:
		return "DNS does not answer"
	case fkDNS:
		return "DNS lookup failed"
	case fkRefused:
		return "connection refused"
	case fkTimeout:
		return "no answer (timeout)"
	case fkUnreachable:
		return "no route"
	case fkReset:
		return "connection closed or reset"
	case fkTLS:
		return "TLS failed"
	case fkProtocol:
		return "unexpected answer"
	case fkUnsupported:
		return "not tested"
	}
	return "failed"
}

// shortErr trims Go's "dial tcp 1.2.3.4:5->...: connect: " prefixes to the
// operating system's words.
func shortErr(err error) string {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		switch {
		case de.IsNotFound:
			return "no such host " + de.Name
		case de.IsTimeout:
			return "DNS timeout looking up " + de.Name
		}
		return de.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return "timed out"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s) > 120 {
		s = s[i+2:]
	}
	return s
}

// failureOf classifies err, which happened while doing stage.
func failureOf(stage string, err error) *failure {
	f := &failure{stage: stage, err: err, kind: fkOther}
	var de *net.DNSError
	var te interface{ Timeout() bool }
	var tlsErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	switch {
	case errors.As(err, &de):
		switch {
		case de.IsNotFound:
			f.kind = fkNotFound
		case de.IsTimeout:
			f.kind = fkDNSTimeout
		default:
			f.kind = fkDNS
		}
	case errors.Is(err, syscall.ECONNREFUSED):
		f.kind = fkRefused
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EINVAL),
		errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EADDRNOTAVAIL):
		// EINVAL/EACCES/EPERM: a local blackhole/prohibit route or a
		// firewall rule refused to send.
		f.kind = fkUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		f.kind = fkTimeout
	case errors.As(err, &tlsErr), errors.As(err, &recErr):
		f.kind = fkTLS
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		f.kind = fkReset
	case errors.As(err, &te) && te.Timeout():
		f.kind = fkTimeout
	}
	return f
}

// dialHost resolves host (search list applied) and connects to its
// addresses in order within one operation timeout.
func (s *state) dialHost(ctx context.Context, host string, port uint16) (net.Conn, netip.AddrPort, *failure) {
	return s.dialHostFam(ctx, host, port, "", false)
}

// dialHostFam is dialHost over the addresses of family fam ("" any). With
// fallback, a host without an address in fam is dialed over any; without,
// that is a failure.
func (s *state) dialHostFam(ctx context.Context, host string, port uint16, fam string, fallback bool) (net.Conn, netip.AddrPort, *failure) {
	res := s.lk.lookup(ctx, host)
	if res.err != nil {
		return nil, netip.AddrPort{}, failureOf("resolve "+host, res.err)
	}
	addrs := familyAddrs(res.addrs, fam)
	if len(addrs) == 0 {
		if !fallback {
			return nil, netip.AddrPort{}, &failure{kind: fkNotFound, stage: "resolve " + host, err: fmt.Errorf("no IPv%s address", fam)}
		}
		addrs = res.addrs
	}
	return s.dialAddrs(ctx, addrs, port)
}

// familyAddrs keeps the addresses of family fam ("4", "6"; "" keeps all).
func familyAddrs(as []netip.Addr, fam string) []netip.Addr {
	if fam == "" {
		return as
	}
	var out []netip.Addr
	for _, a := range as {
		if addrFamily(a) == fam {
			out = append(out, a)
		}
	}
	return out
}

// dialAddrs connects to the first of addrs that accepts.
func (s *state) dialAddrs(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, netip.AddrPort, *failure) {
	dctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	defer cancel()
	var last *failure
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, port)
		c, err := s.d.Dial(dctx, "tcp", ap.String())
		if err == nil {
			return c, ap, nil
		}
		last = failureOf("connect to "+ap.String(), err)
		if dctx.Err() != nil {
			last.kind = fkTimeout
			break
		}
	}
	if last == nil {
		last = &failure{kind: fkNotFound, stage: "no address to connect to"}
	}
	return nil, netip.AddrPort{}, last
}

// answer is an HTTP response read by the doctor (body cut at maxBody).
type answer struct {
	code   int
	status string // "407 Proxy Authentication Required"
	header http.Header
	body   []byte
}

const maxBody = 64 << 10

// deadline sets c's deadline to the earlier of ctx's and one operation
// timeout from now.
func (s *state) deadline(ctx context.Context, c net.Conn) {
	d := time.Now().Add(s.opTimeout())
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	c.SetDeadline(d)
}

// roundTrip writes a request on c and reads the answer (for method).
func (s *state) roundTrip(ctx context.Context, c net.Conn, br *bufio.Reader, req, method, stage string) (*answer, *failure) {
	s.deadline(ctx, c)
	if _, err := io.WriteString(c, req); err != nil {
		return nil, failureOf(stage, err)
	}
	if br == nil {
		br = bufio.NewReader(c)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		f := failureOf(stage, err)
		if f.kind == fkOther {
			f.kind = fkProtocol
			f.err = fmt.Errorf("not an HTTP answer: %w", err)
		}
		return nil, f
	}
	a := &answer{code: resp.StatusCode, status: resp.Status, header: resp.Header}
	if method != http.MethodConnect || resp.StatusCode/100 != 2 {
		a.body, _ = io.ReadAll(io.LimitReader(resp.Body, maxBody))
		resp.Body.Close()
	}
	return a, nil
}

// proxyAuth is the Proxy-Authorization header line for p's user info, or "".
func proxyAuth(p *url.URL) string {
	if p.User == nil {
		return ""
	}
	pass, _ := p.User.Password()
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(p.User.Username()+":"+pass)) + "\r\n"
}

// proxyPort is the proxy URL's port with the scheme's default.
func proxyPort(p *url.URL) uint16 {
	if n, err := strconv.ParseUint(p.Port(), 10, 16); err == nil && n > 0 {
		return uint16(n)
	}
	switch p.Scheme {
	case "https":
		return 443
	case "socks5", "socks5h":
		return 1080
	}
	return 80
}

// dialProxy connects to proxy p (TLS for https://).
func (s *state) dialProxy(ctx context.Context, p *url.URL) (net.Conn, *failure) {
	return s.dialProxyFam(ctx, p, "")
}

// dialProxyFam connects to proxy p over address family fam ("4", "6")
// when the proxy has an address in it, else over any.
func (s *state) dialProxyFam(ctx context.Context, p *url.URL, fam string) (net.Conn, *failure) {
	if strings.HasPrefix(p.Scheme, "socks5") {
		return nil, &failure{kind: fkUnsupported, stage: "talk to " + redactURL(p), err: errors.New("the doctor tests HTTP proxies only; socks5 is not tested")}
	}
	c, ap, f := s.dialHostFam(ctx, p.Hostname(), proxyPort(p), fam, true)
	if f != nil {
		if f.stage == "resolve "+strings.ToLower(p.Hostname()) {
			return nil, f
		}
		f.stage = "connect to the proxy " + net.JoinHostPort(p.Hostname(), strconv.Itoa(int(proxyPort(p))))
		if ap.IsValid() {
			f.stage += " (" + ap.String() + ")"
		}
		return nil, f
	}
	if p.Scheme == "https" {
		tc := tls.Client(c, s.tlsConfig(p.Hostname()))
		s.deadline(ctx, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			f := failureOf("TLS with the proxy "+p.Host, err)
			if f.kind == fkOther {
				f.kind = fkTLS
			}
			return nil, f
		}
		return tc, nil
	}
	return c, nil
}

func (s *state) tlsConfig(serverName string) *tls.Config {
	var cfg *tls.Config
	if s.d.TLSConfig != nil {
		cfg = s.d.TLSConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	cfg.ServerName = serverName
	return cfg
}

// connectVia sends CONNECT hostport to proxy p. On a 2xx answer the
// returned connection is the tunnel (with br holding any early bytes);
// otherwise the connection is closed and only the answer returned.
func (s *state) connectVia(ctx context.Context, p *url.URL, hostport string) (net.Conn, *bufio.Reader, *answer, *failure) {
	return s.connectViaFam(ctx, p, hostport, "")
}

// connectViaFam is connectVia reaching the proxy over family fam.
func (s *state) connectViaFam(ctx context.Context, p *url.URL, hostport, fam string) (net.Conn, *bufio.Reader, *answer, *failure) {
	c, f := s.dialProxyFam(ctx, p, fam)
	if f != nil {
		return nil, nil, nil, f
	}
	req := "CONNECT " + hostport + " HTTP/1.1\r\nHost: " + hostport + "\r\n" + proxyAuth(p) + "User-Agent: egret-doctor\r\n\r\n"
	br := bufio.NewReader(c)
	a, f := s.roundTrip(ctx, c, br, req, http.MethodConnect, "CONNECT "+hostport+" via "+redactURL(p))
	if f != nil {
		c.Close()
		return nil, nil, nil, f
	}
	if a.code/100 != 2 {
		c.Close()
		return nil, nil, a, nil
	}
	return c, br, a, nil
}

// getVia fetches u through proxy p the way clients do: absolute-form GET
// for http://, CONNECT then TLS for https://. A non-2xx answer of the
// proxy comes back as proxyAns and a failure to talk to the proxy as f;
// the origin's answer as ans, a failure past the proxy (TLS with the
// origin through the tunnel) as originF.
func (s *state) getVia(ctx context.Context, p *url.URL, u *url.URL) (ans, proxyAns *answer, f, originF *failure) {
	return s.getViaFam(ctx, p, u, "")
}

// getViaFam is getVia reaching the proxy over family fam.
func (s *state) getViaFam(ctx context.Context, p *url.URL, u *url.URL, fam string) (ans, proxyAns *answer, f, originF *failure) {
	hostport := hostPortOf(u)
	if u.Scheme == "https" {
		c, br, pa, f := s.connectViaFam(ctx, p, hostport, fam)
		if f != nil || pa.code/100 != 2 {
			return nil, pa, f, nil
		}
		defer c.Close()
		ans, of := s.getOver(ctx, c, br, u, true)
		return ans, nil, nil, of
	}
	c, f := s.dialProxyFam(ctx, p, fam)
	if f != nil {
		return nil, nil, f, nil
	}
	defer c.Close()
	req := "GET " + u.String() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n" + proxyAuth(p) +
		"User-Agent: egret-doctor\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
	a, f := s.roundTrip(ctx, c, nil, req, http.MethodGet, "GET "+u.String()+" via "+redactURL(p))
	if f != nil {
		return nil, nil, f, nil
	}
	if fromProxy(a) {
		return nil, a, nil, nil
	}
	return a, nil, nil, nil
}

// fromProxy tells a proxy's own error answer from the origin's answer on
// the absolute-form path: proxies mark theirs (Proxy-Status, X-Squid-Error,
// 407) and an echo server answers 200 with JSON.
func fromProxy(a *answer) bool {
	if a.code/100 == 2 {
		return false
	}
	return a.code == http.StatusProxyAuthRequired || a.header.Get("Proxy-Status") != "" ||
		a.header.Get("X-Squid-Error") != "" || a.code >= 500 || a.code == http.StatusForbidden
}

// getDirect fetches u without a proxy; addr is where it connected.
func (s *state) getDirect(ctx context.Context, u *url.URL, verify bool) (*answer, netip.AddrPort, *failure) {
	return s.getDirectFam(ctx, u, verify, "")
}

// getDirectFam is getDirect over the target's addresses of family fam.
func (s *state) getDirectFam(ctx context.Context, u *url.URL, verify bool, fam string) (*answer, netip.AddrPort, *failure) {
	port, _ := strconv.ParseUint(portOf(u), 10, 16)
	c, ap, f := s.dialHostFam(ctx, u.Hostname(), uint16(port), fam, false)
	if f != nil {
		return nil, ap, f
	}
	defer c.Close()
	a, f := s.getOver(ctx, c, nil, u, verify)
	return a, ap, f
}

// getOver sends a GET for u over an open connection (TLS first for https).
func (s *state) getOver(ctx context.Context, c net.Conn, br *bufio.Reader, u *url.URL, verify bool) (*answer, *failure) {
	if u.Scheme == "https" {
		cfg := s.tlsConfig(u.Hostname())
		cfg.InsecureSkipVerify = !verify
		var raw net.Conn = c
		if br != nil && br.Buffered() > 0 {
			raw = &prefixConn{Conn: c, r: br}
		}
		tc := tls.Client(raw, cfg)
		s.deadline(ctx, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			f := failureOf("TLS with "+u.Host, err)
			if f.kind == fkOther {
				f.kind = fkTLS
			}
			return nil, f
		}
		c, br = tc, nil
	}
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: egret-doctor\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
	return s.roundTrip(ctx, c, br, req, http.MethodGet, "GET "+u.String())
}

// prefixConn reads buffered bytes before the connection's.
type prefixConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// hostPortOf is u's host:port with the scheme's default port.
func hostPortOf(u *url.URL) string { return net.JoinHostPort(u.Hostname(), portOf(u)) }

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// echoIP reads the caller's address from an `egret echo` answer.
func echoIP(a *answer) (netip.Addr, error) {
	if a.code != http.StatusOK {
		return netip.Addr{}, fmt.Errorf("the echo server answered %s", a.status)
	}
	var r echo.Reply
	if err := json.Unmarshal(a.body, &r); err != nil {
		return netip.Addr{}, fmt.Errorf("not an egret echo answer: %w", err)
	}
	ip, err := netip.ParseAddr(r.RemoteIP)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("egret echo answer without a remote_ip: %w", err)
	}
	return ip.Unmap(), nil
}

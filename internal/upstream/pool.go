package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/proxy"

	"egret.io/egret/internal/proxystatus"
)

// Defaults for Pool fields left zero.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultConnectTimeout = 15 * time.Second
)

// Pool is a named set of upstream proxies used round-robin. A member that
// fails (cannot be dialled, times out, or refuses the CONNECT with 407, 403
// or 5xx) is skipped and the next one is tried; the error of the last member
// tried is returned when all fail.
type Pool struct {
	Name    string
	Members []*Member
	// Dialer dials members; nil means a net.Dialer with DefaultDialTimeout.
	Dialer interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	}
	// TLSConfig is used for https:// members; nil means the system roots.
	// ServerName is set per member.
	TLSConfig *tls.Config
	// ConnectTimeout bounds the whole handshake with one member (dial, TLS,
	// CONNECT answer); zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration

	next atomic.Uint64
}

// Candidates returns the members in the order to try them for one attempt.
func (p *Pool) Candidates() []*Member {
	n := len(p.Members)
	if n == 0 {
		return nil
	}
	start := int(p.next.Add(1)-1) % n
	out := make([]*Member, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, p.Members[(start+i)%n])
	}
	return out
}

// Tunnel is an established CONNECT tunnel through a member.
type Tunnel struct {
	net.Conn
	Member *Member
	// Prefix holds bytes the member sent after its CONNECT answer that are
	// already read from Conn; they belong to the tunnel and must be relayed
	// first.
	Prefix []byte
}

// DialTunnel opens a tunnel to target ("host:port") through the pool.
func (p *Pool) DialTunnel(ctx context.Context, target string) (*Tunnel, error) {
	cands := p.Candidates()
	if len(cands) == 0 {
		return nil, &proxystatus.Error{Type: proxystatus.PoolUnavailable, Detail: fmt.Sprintf("pool %q has no members", p.Name)}
	}
	var last error
	for _, m := range cands {
		t, err := p.dialMember(ctx, m, target)
		if err == nil {
			return t, nil
		}
		last = err
		if ctx.Err() != nil || !Retryable(err) {
			break
		}
	}
	return nil, last
}

// Retryable reports whether a failed attempt through one member may be
// repeated with another: connection failures and refusals by the member.
func Retryable(err error) bool {
	var pe *proxystatus.Error
	if !errors.As(err, &pe) || pe.Upstream == "" {
		return false
	}
	switch pe.Type {
	case proxystatus.UpstreamAuthRequired, proxystatus.UpstreamRefused,
		proxystatus.ConnectionRefused, proxystatus.ConnectionTimeout,
		proxystatus.ConnectionTerminated, proxystatus.DestinationIPUnroute,
		proxystatus.DNSError, proxystatus.DNSTimeout, proxystatus.DestinationNotFound,
		proxystatus.TLSProtocolError, proxystatus.TLSCertificateError:
		return true
	}
	return false
}

func (p *Pool) dialMember(ctx context.Context, m *Member, target string) (*Tunnel, error) {
	timeout := p.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if m.URL.Scheme == SchemeSOCKS5 {
		return p.dialSOCKS(ctx, m, target)
	}
	c, err := p.dial(ctx, m.URL.Host)
	if err != nil {
		return nil, memberErr(m, "connect to upstream", err)
	}
	if m.URL.Scheme == SchemeHTTPS {
		cfg := &tls.Config{}
		if p.TLSConfig != nil {
			cfg = p.TLSConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = m.URL.Hostname()
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			var ce *tls.CertificateVerificationError
			t := proxystatus.TLSProtocolError
			if errors.As(err, &ce) {
				t = proxystatus.TLSCertificateError
			}
			return nil, &proxystatus.Error{Type: t, Upstream: m.Name, Detail: "TLS to upstream: " + err.Error(), Err: err}
		}
		c = tc
	}
	prefix, err := Connect(ctx, c, target, m.AuthHeader(), m.Name)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &Tunnel{Conn: c, Member: m, Prefix: prefix}, nil
}

func (p *Pool) dial(ctx context.Context, addr string) (net.Conn, error) {
	if p.Dialer != nil {
		return p.Dialer.DialContext(ctx, "tcp", addr)
	}
	d := net.Dialer{Timeout: DefaultDialTimeout}
	return d.DialContext(ctx, "tcp", addr)
}

func (p *Pool) dialSOCKS(ctx context.Context, m *Member, target string) (*Tunnel, error) {
	var auth *proxy.Auth
	if m.hasAuth {
		auth = &proxy.Auth{User: m.user, Password: m.password}
	}
	var fwd proxy.Dialer = proxy.Direct
	if p.Dialer != nil {
		fwd = ctxDialer{p.Dialer}
	}
	d, err := proxy.SOCKS5("tcp", m.URL.Host, auth, fwd)
	if err != nil {
		return nil, memberErr(m, "socks5 upstream", err)
	}
	c, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, memberErr(m, "socks5 connect", err)
	}
	return &Tunnel{Conn: c, Member: m}, nil
}

type ctxDialer struct {
	d interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	}
}

func (c ctxDialer) Dial(network, addr string) (net.Conn, error) {
	return c.d.DialContext(context.Background(), network, addr)
}

func (c ctxDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return c.d.DialContext(ctx, network, addr)
}

func memberErr(m *Member, doing string, err error) error {
	pe := proxystatus.From(err)
	out := *pe
	out.Upstream = m.Name
	out.Detail = doing + " " + m.Name + ": " + errText(err)
	out.Err = err
	if out.Type == proxystatus.ProxyInternalError {
		out.Type = proxystatus.ConnectionTerminated
	}
	return &out
}

// errText strips Go's "dial tcp 1.2.3.4:5:" noise down to the cause.
func errText(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1024) }}

// Connect performs an HTTP CONNECT handshake for target on c, which is
// already connected to an HTTP proxy named name. auth is the
// Proxy-Authorization value or "". It returns bytes that arrived after the
// proxy's 200 answer. Failures are *proxystatus.Error values naming the proxy.
func Connect(ctx context.Context, c net.Conn, target, auth, name string) ([]byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
		defer c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var b strings.Builder
	b.Grow(96 + len(auth))
	b.WriteString("CONNECT ")
	b.WriteString(target)
	b.WriteString(" HTTP/1.1\r\nHost: ")
	b.WriteString(target)
	b.WriteString("\r\n")
	if auth != "" {
		b.WriteString("Proxy-Authorization: ")
		b.WriteString(auth)
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: name, Detail: "send CONNECT to upstream: " + errText(err), Err: err}
	}
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(c)
	defer func() { br.Reset(nil); readerPool.Put(br) }()
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t := proxystatus.HTTPProtocolError
		if pe := proxystatus.From(err); pe.Type != proxystatus.ProxyInternalError {
			t = pe.Type
		}
		if t == proxystatus.ConnectionTimeout {
			t = proxystatus.ConnectionReadTimeout
		}
		return nil, &proxystatus.Error{Type: t, Upstream: name, Detail: "read upstream's CONNECT answer: " + errText(err), Err: err}
	}
	if resp.StatusCode/100 == 2 {
		if n := br.Buffered(); n > 0 {
			prefix := make([]byte, n)
			br.Read(prefix)
			return prefix, nil
		}
		return nil, nil
	}
	resp.Body.Close()
	return nil, RefusalError(name, resp)
}

// RefusalError turns a non-2xx answer of an upstream proxy into an error.
// A 407 becomes UpstreamAuthRequired answered as 502, so the client is never
// told its own credentials are wrong. Other statuses keep their code.
func RefusalError(name string, resp *http.Response) *proxystatus.Error {
	code := resp.StatusCode
	e := &proxystatus.Error{Type: proxystatus.UpstreamRefused, Upstream: name, Status: code}
	detail := fmt.Sprintf("upstream %s answered %d %s", name, code, http.StatusText(code))
	if ps := resp.Header.Get("Proxy-Status"); ps != "" {
		detail += " (" + ps + ")"
	}
	switch {
	case code == http.StatusProxyAuthRequired:
		e.Type, e.Status = proxystatus.UpstreamAuthRequired, http.StatusBadGateway
		detail = fmt.Sprintf("upstream %s rejected egret's credentials (407)", name)
	case code < 400 || code > 599:
		e.Status = http.StatusBadGateway
	}
	e.Detail = detail
	return e
}

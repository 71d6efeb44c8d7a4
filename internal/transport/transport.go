package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/upstream"
)

// TLSHandshakeTimeout bounds TLS to an https origin of a forwarded URL.
const TLSHandshakeTimeout = 10 * time.Second

// Key says which requests a connection may carry, like http.Transport's
// connectMethodKey: it is the key of the transport's idle pool.
type Key struct {
	// Member is the upstream the connection goes through; nil when direct.
	Member *upstream.Member
	// Scheme is "http" or "https" for a connection that speaks to the
	// origin (direct, or tunnelled through the member), "" for one that
	// speaks to an http(s) member in absolute form, for any origin.
	Scheme string
	// Addr is the origin's host:port (or the approved address a member is
	// asked for); "" with Scheme "".
	Addr string
	// Host is the name an https connection to a pinned Addr (an address)
	// verified the origin's certificate for: the connection carries only
	// requests for that name. "" otherwise (Addr names the origin).
	Host string
	// Identity is whose credential authenticated the connection: the
	// client connection a connection through an NTLM or Negotiate member
	// was authenticated for. Such a connection carries only that client's
	// requests, and is dropped when the client leaves (Drop). nil for the
	// others, which any client may reuse.
	Identity any
}

// Transport is the one way egret reaches what it dials — origins
// directly, and upstream members (CONNECT, SOCKS5, requests in absolute
// form) with their Basic, NTLM and Negotiate handshakes — and it keeps the
// idle keep-alive connections, by Key. It is safe for concurrent use.
type Transport struct {
	// Dial dials destinations by address ("ip:port"); nil means DialTCP.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OriginTLS configures TLS to https origins (ServerName defaults to the
	// origin's host); nil means the system roots.
	OriginTLS *tls.Config
	// Resolver looks up the host names of upstream members (pools without
	// a Dialer of their own); nil means the system's resolver.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}

	idle *http1.Pool[Key]
	// socketDeadline: Dial is DialTCP, which bounds a connect by its
	// context's deadline on the socket itself (net.Dialer), so a dial's
	// timeout needs no timer of its own (DialAddrsWithin).
	socketDeadline bool
}

// New returns a transport that dials destinations with dial (nil:
// DialTCP) and speaks TLS to https origins with originTLS (nil: the system
// roots).
func New(dial func(ctx context.Context, network, addr string) (net.Conn, error), originTLS *tls.Config) *Transport {
	deadline := dial == nil
	if dial == nil {
		dial = DialTCP
	}
	return &Transport{Dial: dial, OriginTLS: originTLS, idle: http1.NewPool[Key](), socketDeadline: deadline}
}

// Idle returns the idle connections kept.
func (t *Transport) Idle() int { return t.idle.Idle() }

// IdleFor returns the idle connections kept for k.
func (t *Transport) IdleFor(k Key) int { return t.idle.IdleFor(k) }

// StartSweeper closes connections idle for too long until stop closes.
func (t *Transport) StartSweeper(stop <-chan struct{}) { t.idle.StartSweeper(stop) }

// Retire closes every idle connection; connections in use now are closed
// when they come back (a member or a credential changed).
func (t *Transport) Retire() { t.idle.Retire() }

// Close retires everything and keeps nothing more.
func (t *Transport) Close() { t.idle.Close() }

// Drop closes the idle connections kept for k (its Identity left).
func (t *Transport) Drop(k Key) { t.idle.Drop(k) }

var (
	remoteDialer   = &net.Dialer{KeepAlive: 30 * time.Second}
	loopbackDialer = &net.Dialer{KeepAlive: -1}
)

// DialTCP is the default Dial. Like egret's listeners, it sets no TCP
// keep-alive probes on connections to loopback addresses: a peer on the
// same host cannot vanish behind a NAT, and the probes would cost four
// system calls per connection. Other connections keep Go's default probes.
func DialTCP(ctx context.Context, network, addr string) (net.Conn, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().IsLoopback() {
		return loopbackDialer.DialContext(ctx, network, addr)
	}
	return remoteDialer.DialContext(ctx, network, addr)
}

// DialAddrs connects to dest (as named in errors) at one of addrs — the
// addresses admission approved and the guard allowed, in order — on port,
// within ctx: each address but the last gets a fair share of the time
// left (at least 500ms). A failure names dest and the cause.
func (t *Transport) DialAddrs(ctx context.Context, dest string, addrs []netip.Addr, port uint16) (net.Conn, error) {
	var last error
	var abuf [64]byte
	for i, a := range addrs {
		actx := ctx
		var cancel context.CancelFunc = func() {}
		if dl, ok := ctx.Deadline(); ok && i < len(addrs)-1 {
			share := time.Until(dl) / time.Duration(len(addrs)-i)
			actx, cancel = context.WithTimeout(ctx, max(share, 500*time.Millisecond))
		}
		// One allocation for "ip:port" ("[ip%zone]:port" for IPv6).
		c, err := t.Dial(actx, "tcp", string(netip.AddrPortFrom(a, port).AppendTo(abuf[:0])))
		cancel()
		if err == nil {
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	if last == nil {
		return nil, &proxystatus.Error{Type: proxystatus.DestinationUnavailable, Detail: "connect to " + dest + ": no address to dial"}
	}
	pe := proxystatus.From(last)
	out := *pe
	out.Detail = fmt.Sprintf("connect to %s: %s", dest, errText(last))
	if len(addrs) > 1 {
		out.Detail += fmt.Sprintf(" (%d addresses tried)", len(addrs))
	}
	if out.Type == proxystatus.ProxyInternalError {
		out.Type = proxystatus.DestinationUnavailable
	}
	return nil, &out
}

// DialAddrsWithin is DialAddrs within timeout (none when not positive).
// With the default Dial the timeout is a deadline the connect's socket
// enforces (net.Dialer sets it as the socket's write deadline while it
// waits), not a context.WithTimeout: a dial then starts no timer of its
// own — one timer and one context less per tunnel. A custom Dial, or a
// ctx that cannot be cancelled (net.Dialer ignores the deadline of one),
// gets context.WithTimeout as before.
func (t *Transport) DialAddrsWithin(ctx context.Context, timeout time.Duration, dest string, addrs []netip.Addr, port uint16) (net.Conn, error) {
	if timeout > 0 {
		dl := time.Now().Add(timeout)
		if cur, ok := ctx.Deadline(); !ok || dl.Before(cur) {
			if t.socketDeadline && ctx.Done() != nil {
				ctx = deadlineCtx{Context: ctx, dl: dl}
			} else {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, dl)
				defer cancel()
			}
		}
	}
	return t.DialAddrs(ctx, dest, addrs, port)
}

// deadlineCtx is its Context with an earlier deadline that nothing
// enforces but the dial's socket (DialAddrsWithin): Done is the parent's.
// Err reports the deadline once it passed, so DialAddrs stops trying
// further addresses then, as it would under context.WithDeadline.
type deadlineCtx struct {
	context.Context
	dl time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.dl, true }

func (c deadlineCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// OriginTLSConn makes c (to dest, named host) a TLS connection with
// OriginTLS, within TLSHandshakeTimeout.
func (t *Transport) OriginTLSConn(ctx context.Context, c net.Conn, host, dest string) (*tls.Conn, error) {
	cfg := &tls.Config{}
	if t.OriginTLS != nil {
		cfg = t.OriginTLS.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	ctx, cancel := context.WithTimeout(ctx, TLSHandshakeTimeout)
	defer cancel()
	tc, err := handshakeTLS(ctx, c, cfg)
	if err != nil {
		pe := err.(*proxystatus.Error)
		pe.Detail = "TLS to " + dest + ": " + pe.Err.Error()
		return nil, pe
	}
	return tc, nil
}

// handshakeTLS runs a client handshake on c; a failure closes c and is a
// *proxystatus.Error (certificate or protocol) wrapping the cause.
func handshakeTLS(ctx context.Context, c net.Conn, cfg *tls.Config) (*tls.Conn, error) {
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		t := proxystatus.TLSProtocolError
		var ce *tls.CertificateVerificationError
		if errors.As(err, &ce) {
			t = proxystatus.TLSCertificateError
		}
		return nil, &proxystatus.Error{Type: t, Err: err}
	}
	return tc, nil
}

// RawConn returns the socket beneath a TLS connection.
func RawConn(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}

// WithPrefix returns a connection that reads prefix before what it reads
// from c (bytes already taken from c: a tunnel's first bytes).
func WithPrefix(c net.Conn, prefix []byte) net.Conn {
	if len(prefix) == 0 {
		return c
	}
	return &prefixConn{Conn: c, prefix: prefix}
}

// prefixConn returns prefix before what it reads from Conn.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// ClientGoneDetail is the detail of ClientGoneError's errors.
const ClientGoneDetail = "client went away"

// ClientGoneError wraps a failure on the client's side (it left, or
// writing to it failed) as the error logged for it: a ClientGone, read
// with IsClientGone.
func ClientGoneError(err error) *proxystatus.Error {
	return &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: ClientGoneDetail, Err: &ClientGone{Err: err}}
}

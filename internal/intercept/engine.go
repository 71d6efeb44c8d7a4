package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"egret.io/egret/internal/proxystatus"
)

// Defaults of Engine's zero fields.
const (
	DefaultHandshakeTimeout     = 10 * time.Second
	DefaultIdleTimeout          = 90 * time.Second
	DefaultMaxHeaderBytes       = 64 << 10
	DefaultMaxConcurrentStreams = 100
	DefaultMaxOriginConns       = 8
	// maxRecorded bounds what is kept of a ClientHello while deciding
	// whether the tunnel is exempt (a ClientHello is rarely over 2 KiB;
	// post-quantum key shares make it about 1.5 KiB more).
	maxRecorded = 32 << 10
)

// Engine terminates and originates TLS for intercepted tunnels and proxies
// the HTTP/1.1 and HTTP/2 requests inside them. One Engine serves every
// intercepted tunnel of a proxy; it is safe for concurrent use, and its
// fields must not change once Serve has been called.
type Engine struct {
	// Issuer issues the leaves clients see. Required.
	Issuer *Issuer
	// RootCAs verifies origins; nil means the system roots (OriginRoots
	// builds the system roots plus configured CAs). Verification is never
	// skipped.
	RootCAs *x509.CertPool
	// Log, when set, receives one Event per request inside an intercepted
	// tunnel. It is called on the request's goroutine.
	Log func(*Event)
	// HandshakeTimeout bounds the client's TLS handshake and the time to
	// read a request's header; zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a client connection idle between requests; zero
	// means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the origin's response
	// header once the request is sent; zero means no bound (a model API may
	// think for minutes before it answers).
	ResponseHeaderTimeout time.Duration
	// MaxHeaderBytes bounds a request's header section; zero means
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxConcurrentStreams bounds the HTTP/2 streams of a client
	// connection; zero means DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
	// MaxOriginConns bounds the connections one tunnel opens to its origin
	// (an HTTP/2 client multiplexed onto an HTTP/1.1 origin); zero means
	// DefaultMaxOriginConns.
	MaxOriginConns int

	once     sync.Once
	h2       *http2.Server
	h2base   *http.Server
	sessions tls.ClientSessionCache
	bufs     bufferPool
	stats    engineStats
}

// OriginRoots is the pool origins are verified against: the system roots
// plus the CA certificates in extraPEM (an internal CA of some
// destinations). A PEM without certificates is an error.
func OriginRoots(extraPEM []byte) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	} else {
		pool = pool.Clone()
	}
	if len(extraPEM) > 0 {
		certs, err := parseCerts(extraPEM, "the origin CA file")
		if err != nil {
			return nil, err
		}
		if len(certs) == 0 {
			return nil, errors.New("the origin CA file holds no certificate")
		}
		for _, c := range certs {
			pool.AddCert(c)
		}
	}
	return pool, nil
}

func (e *Engine) init() {
	e.once.Do(func() {
		e.h2base = &http.Server{MaxHeaderBytes: e.maxHeaderBytes(), ErrorLog: discardLog}
		e.h2 = &http2.Server{
			MaxConcurrentStreams: e.maxStreams(),
			IdleTimeout:          e.idleTimeout(),
			MaxReadFrameSize:     1 << 20,
		}
		e.sessions = tls.NewLRUClientSessionCache(1024)
	})
}

func (e *Engine) handshakeTimeout() time.Duration {
	if e.HandshakeTimeout > 0 {
		return e.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

func (e *Engine) idleTimeout() time.Duration {
	if e.IdleTimeout > 0 {
		return e.IdleTimeout
	}
	return DefaultIdleTimeout
}

func (e *Engine) maxHeaderBytes() int {
	if e.MaxHeaderBytes > 0 {
		return e.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}

func (e *Engine) maxStreams() uint32 {
	if e.MaxConcurrentStreams > 0 {
		return e.MaxConcurrentStreams
	}
	return DefaultMaxConcurrentStreams
}

func (e *Engine) maxOriginConns() int {
	if e.MaxOriginConns > 0 {
		return e.MaxOriginConns
	}
	return DefaultMaxOriginConns
}

// Tunnel is one admitted CONNECT that is to be intercepted.
type Tunnel struct {
	// Host and Port are the admitted CONNECT target (Host a name or an IP
	// literal without brackets).
	Host, Port string
	// Client and Workload name the client in the log (address, and the
	// workload identity when known).
	Client, Workload string
	// Site holds the rules and credentials for this destination and
	// workload; nil intercepts with neither (every request allowed, none
	// changed).
	Site *Site
	// Dial connects to the admitted destination — the address the policy
	// approved, through the route it chose. Required.
	Dial func(ctx context.Context) (net.Conn, error)
	// Origin, when set, is a connection Dial already made; the first TLS
	// connection to the origin runs over it.
	Origin net.Conn
	// Passthrough, when set, is called for a client whose TLS server name
	// the Site exempts: conn replays the ClientHello first, and the caller
	// relays it as an opaque tunnel. Without it an exempt name is refused.
	Passthrough func(conn net.Conn) error
}

// Result is what Serve did with a tunnel, for its log line.
type Result struct {
	// SNI is the server name the client sent; Exempt is set when the
	// tunnel went to Passthrough.
	SNI    string
	Exempt bool
	// Protocol is the protocol negotiated with the client: "h2" or
	// "http/1.1".
	Protocol string
	// Requests counts the requests served.
	Requests int64
}

// HandshakeError is a client handshake egret did not complete.
type HandshakeError struct {
	// Reason is a closed set: sni_mismatch, bad_name, no_leaf, exempt_refused,
	// client_rejected_leaf, handshake_timeout, client_closed, plain_http,
	// not_tls, tls_error.
	Reason string
	// Hint says what to do, when there is something to do.
	Hint string
	Err  error
}

func (e *HandshakeError) Error() string {
	s := "client TLS handshake: " + e.Reason + ": " + e.Err.Error()
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

func (e *HandshakeError) Unwrap() error { return e.Err }

var errExempt = errors.New("the server name is exempt from interception")

// Serve intercepts one tunnel: client is the connection after egret's 200
// to the CONNECT. It returns when the client connection is done (or ctx
// ends), having closed it and every origin connection it opened. The error
// is a *HandshakeError when the client's handshake failed.
func (e *Engine) Serve(ctx context.Context, client net.Conn, t *Tunnel) (Result, error) {
	e.init()
	var res Result
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { client.Close() })
	defer stop()

	// The first byte says whether the client speaks TLS at all: plain HTTP
	// in a tunnel to a site (Node's fetch tunnels http:// URLs through
	// CONNECT) gets an answer it can read, never the origin past the
	// site's rules and credentials.
	client.SetDeadline(time.Now().Add(e.handshakeTimeout()))
	var first [1]byte
	if _, err := io.ReadFull(client, first[:]); err != nil {
		he := &HandshakeError{Err: err}
		classifyHandshake(he, t)
		e.stats.handshakeFailed(he.Reason)
		client.Close()
		return res, he
	}
	client = &replayConn{Conn: client, buf: first[:]}
	if first[0] != 0x16 { // not a TLS handshake record
		he := refuseCleartext(client, t, first[0])
		e.stats.handshakeFailed(he.Reason)
		client.Close()
		return res, he
	}

	s := newSession(e, t)
	defer s.close()
	rc := &recordConn{Conn: client, recording: true}
	var hs struct {
		reason, hint string
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			res.SNI = hi.ServerName
			// The server name must be the admitted target's before it is
			// looked at for anything else: an exempt name in a tunnel
			// admitted for another host would pass an opaque tunnel to
			// that host, past its rules.
			name, err := LeafName(t.Host, hi.ServerName)
			if err != nil {
				hs.reason = "bad_name"
				if errors.Is(err, ErrNameMismatch) {
					hs.reason = "sni_mismatch"
				}
				return nil, err
			}
			if hi.ServerName != "" && t.Site != nil && t.Site.IsExempt(name.String()) {
				if t.Passthrough == nil || rc.overflow {
					hs.reason = "exempt_refused"
					return nil, errExempt
				}
				rc.swallow = true // no alert: the client's handshake goes on with the origin
				return nil, errExempt
			}
			rc.recording, rc.rec = false, nil
			cert, err := e.Issuer.Certificate(name)
			if err != nil {
				hs.reason = "no_leaf"
				return nil, err
			}
			s.predial(ctx)
			return &tls.Config{
				Certificates: []tls.Certificate{*cert},
				NextProtos:   []string{"h2", "http/1.1"},
				MinVersion:   tls.VersionTLS12,
			}, nil
		},
	}
	tc := tls.Server(rc, cfg)
	client.SetDeadline(time.Now().Add(e.handshakeTimeout()))
	err := tc.HandshakeContext(ctx)
	if err != nil {
		if rc.swallow {
			res.Exempt = true
			e.stats.exempt.Add(1)
			client.SetDeadline(time.Time{})
			stop()
			return res, t.Passthrough(&replayConn{Conn: client, buf: rc.rec})
		}
		he := &HandshakeError{Reason: hs.reason, Err: err}
		classifyHandshake(he, t)
		e.stats.handshakeFailed(he.Reason)
		client.Close()
		return res, he
	}
	client.SetDeadline(time.Time{})
	e.stats.handshakes.Add(1)
	state := tc.ConnectionState()
	res.Protocol = state.NegotiatedProtocol
	if res.Protocol == "" {
		res.Protocol = "http/1.1"
	}
	s.proto = res.Protocol
	if res.Protocol == "h2" {
		e.h2.ServeConn(tc, &http2.ServeConnOpts{Context: ctx, Handler: s, BaseConfig: e.h2base})
	} else {
		e.serveHTTP1(ctx, tc, s)
	}
	s.waitHandlers()
	tc.Close()
	res.Requests = s.requests.Load()
	return res, nil
}

// refuseCleartext answers a client that sent first (not a TLS record) in a
// tunnel to a site: plain HTTP gets a 403 naming the fix, anything else
// only the close.
func refuseCleartext(client net.Conn, t *Tunnel, first byte) *HandshakeError {
	if first < 'A' || first > 'Z' {
		return &HandshakeError{Reason: "not_tls", Err: errors.New("the client sent neither TLS nor HTTP"),
			Hint: t.Host + " is intercepted: egret serves it only over TLS"}
	}
	detail := t.Host + " is intercepted (its method/path rules and credentials): egret serves it only over TLS; use an https:// URL"
	proxystatus.WriteRaw(client, &proxystatus.Error{Type: proxystatus.HTTPRequestDenied, Status: 403, Detail: detail}, true)
	return &HandshakeError{Reason: "plain_http", Err: errors.New("plain HTTP in a tunnel to an intercepted site"),
		Hint: "use an https:// URL for " + t.Host}
}

// classifyHandshake fills Reason and Hint from what the handshake said.
func classifyHandshake(he *HandshakeError, t *Tunnel) {
	if he.Reason != "" {
		switch he.Reason {
		case "sni_mismatch":
			he.Hint = "the client asked for one name in CONNECT and another in TLS; egret issues no certificate for a name it was not asked to reach"
		case "exempt_refused":
			he.Hint = "the name is exempt from interception but this listener cannot pass the tunnel through"
		}
		return
	}
	msg := he.Err.Error()
	var ne net.Error
	switch {
	case errors.As(he.Err, &ne) && ne.Timeout():
		he.Reason = "handshake_timeout"
	case errors.Is(he.Err, io.EOF), strings.Contains(msg, "connection reset"):
		he.Reason = "client_closed"
		he.Hint = "a client that closes during the handshake often does not trust egret's interception CA, or pins " + t.Host + "'s certificate: give it the trust bundle, or exempt the name"
	case strings.Contains(msg, "remote error"):
		he.Reason = "client_rejected_leaf"
		he.Hint = "the client does not trust egret's interception CA for " + t.Host + ", or pins the origin's certificate: give it the trust bundle, or exempt the name"
	default:
		he.Reason = "tls_error"
	}
}

// serveHTTP1 serves the requests of one HTTP/1.1 client connection.
func (e *Engine) serveHTTP1(ctx context.Context, c *tls.Conn, s *session) {
	ln := &oneConnListener{c: c, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: e.handshakeTimeout(),
		IdleTimeout:       e.idleTimeout(),
		MaxHeaderBytes:    e.maxHeaderBytes(),
		ErrorLog:          discardLog,
		// OPTIONS * is the origin's to answer, judged by the rules like
		// any request: net/http would answer it 200 itself.
		DisableGeneralOptionsHandler: true,
		BaseContext:                  func(net.Listener) context.Context { return ctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				ln.Close()
			}
		},
	}
	_ = srv.Serve(ln)
}

// oneConnListener hands one connection to an http.Server, then blocks
// Accept until the connection is done.
type oneConnListener struct {
	c     net.Conn
	given bool
	once  sync.Once
	done  chan struct{}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.given {
		l.given = true
		return l.c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// recordConn keeps what the client sent until the TLS server name is
// known, so an exempt tunnel can replay the ClientHello to the origin; when
// swallow is set, nothing is written to the client (no alert).
type recordConn struct {
	net.Conn
	recording, swallow, overflow bool
	rec                          []byte
}

func (c *recordConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.recording && n > 0 {
		if len(c.rec)+n > maxRecorded {
			c.recording, c.overflow, c.rec = false, true, nil
		} else {
			c.rec = append(c.rec, p[:n]...)
		}
	}
	return n, err
}

func (c *recordConn) Write(p []byte) (int, error) {
	if c.swallow {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// replayConn reads buf, then the connection.
type replayConn struct {
	net.Conn
	buf []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection when it can.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

var discardLog = log.New(io.Discard, "", 0)

// bufferPool lends the 32 KiB buffers bodies are copied with.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v := b.p.Get(); v != nil {
		return *v.(*[]byte)
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

var _ httputil.BufferPool = (*bufferPool)(nil)

// engineStats counts what the Engine did (Stats).
type engineStats struct {
	handshakes, exempt, origin, resumed                          atomic.Uint64
	hsMismatch, hsRejected, hsTimeout, hsClosed, hsOther, hsLeaf atomic.Uint64
	allowed, denied, reported, failed                            atomic.Uint64
}

func (s *engineStats) handshakeFailed(reason string) {
	switch reason {
	case "sni_mismatch", "bad_name":
		s.hsMismatch.Add(1)
	case "client_rejected_leaf":
		s.hsRejected.Add(1)
	case "handshake_timeout":
		s.hsTimeout.Add(1)
	case "client_closed":
		s.hsClosed.Add(1)
	case "no_leaf":
		s.hsLeaf.Add(1)
	default:
		s.hsOther.Add(1)
	}
}

// Stats are the Engine's counts so far.
type Stats struct {
	// Handshakes completed with clients; Exempt tunnels passed through.
	Handshakes, Exempt uint64
	// OriginHandshakes completed with origins, of which Resumed resumed a
	// TLS session (no certificate to verify again).
	OriginHandshakes, Resumed uint64
	// HandshakeFailures by reason.
	HandshakeFailures map[string]uint64
	// Requests by what the rules decided: allowed, denied (403),
	// reported (a deny in report mode, let through), failed (egret
	// answered with an error of its own: origin unreachable or
	// unverifiable, credential not loaded, misdirected).
	Allowed, Denied, Reported, Failed uint64
}

// Stats returns the counts so far.
func (e *Engine) Stats() Stats {
	s := &e.stats
	return Stats{
		Handshakes: s.handshakes.Load(), Exempt: s.exempt.Load(), OriginHandshakes: s.origin.Load(), Resumed: s.resumed.Load(),
		HandshakeFailures: map[string]uint64{
			"sni_mismatch": s.hsMismatch.Load(), "client_rejected_leaf": s.hsRejected.Load(),
			"handshake_timeout": s.hsTimeout.Load(), "client_closed": s.hsClosed.Load(),
			"no_leaf": s.hsLeaf.Load(), "other": s.hsOther.Load(),
		},
		Allowed: s.allowed.Load(), Denied: s.denied.Load(), Reported: s.reported.Load(), Failed: s.failed.Load(),
	}
}

package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/sniff"
	"egret.io/egret/internal/socks5"
)

// How each tunnel listener's tunnels are answered: its side of the tail
// (tail.go) — CONNECT (HTTP answers), SOCKS5 (replies), transparent (no
// answer but an HTTP client's refusal). The tail calls a side down here —
// refusal, hand-over, the answer that the tunnel is up — and a side calls
// nothing back in its listener's file: a CONNECT's walk goes engine.go →
// connect.go → tail.go → answer.go (→ respond.go for a refusal), a
// SOCKS5 one's socks.go → tail.go → answer.go, and none returns to a file
// it left.

// established is the answer to a CONNECT whose tunnel is up.
const established = "HTTP/1.1 200 Connection established\r\n\r\n"

// connectSide is a CONNECT's part in the tail: HTTP answers.
type connectSide struct {
	cc   *clientConn
	req  *http.Request
	keep bool // the connection may carry another request (after a refusal)
}

func (cs *connectSide) refuse(ev *event, e *proxystatus.Error, _ error) {
	cs.keep = cs.cc.fail(cs.req, ev, e, false)
}

func (cs *connectSide) hand(sc *Conn) { cs.cc.handOff(sc) }

func (cs *connectSide) established([]byte) ([]byte, *proxystatus.Error) {
	if _, err := io.WriteString(cs.cc.c, established); err != nil {
		return nil, clientGone(err)
	}
	return http1.Buffered(cs.cc.r.Buf()), nil
}

// handOff gives the connection to the tunnel of sc: the tunnel closes it
// and, when it ends, releases the client's connection slot (sc's lease).
func (cc *clientConn) handOff(sc *Conn) {
	cc.handedOff = true
	sc.lease.hold(cc.slot)
	cc.slot = nil
}

// socksSide is a SOCKS5 request's part in the tail: SOCKS5 replies.
type socksSide struct {
	s   *Server
	ctx context.Context
	c   net.Conn
	l   *lease // the connection's slots
	sc  *Conn
}

func (ss *socksSide) refuse(ev *event, e *proxystatus.Error, cause error) {
	ss.s.refuseSOCKS(ss.ctx, ev, ss.c, socksReplyFor(cause, e), e)
}

func (ss *socksSide) hand(sc *Conn) {
	ss.sc = sc
	sc.lease.take(ss.l) // the connection's slot, until the tunnel ends
}

func (ss *socksSide) established(more []byte) ([]byte, *proxystatus.Error) {
	bound, _ := addrPort(ss.sc.Conn.LocalAddr())
	if err := socks5.Reply(ss.c, socks5.Succeeded, bound); err != nil {
		return nil, &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: "send the SOCKS5 reply: " + errText(err), Err: err}
	}
	ss.c.SetDeadline(time.Time{})
	return more, nil
}

// refuseSOCKS answers a request with a failure reply, closes the
// connection and logs e.
func (s *Server) refuseSOCKS(ctx context.Context, ev *event, c net.Conn, code socks5.ReplyCode, e *proxystatus.Error) {
	socks5.Reply(c, code, netip.AddrPort{})
	c.Close()
	s.failRaw(ctx, ev, e, e.Code())
}

// socksReplyFor maps a failed dial to a SOCKS5 reply code. A direct dial's
// operating-system error says what happened at the destination. Through an
// upstream, only the upstream's own answer says anything about the
// destination: a 403 is a policy refusal ("not allowed by ruleset"), a 504
// a timeout; everything else is the upstream's failure, a general one.
func socksReplyFor(err error, e *proxystatus.Error) socks5.ReplyCode {
	if e.Upstream != "" {
		switch {
		case e.Type == proxystatus.UpstreamRefused && e.Status == http.StatusForbidden:
			return socks5.NotAllowed
		case e.Type == proxystatus.UpstreamRefused && e.Status == http.StatusGatewayTimeout:
			return socks5.TTLExpired
		}
		return socks5.GeneralFailure
	}
	if code := socks5.ReplyCodeFor(err); code != socks5.GeneralFailure {
		return code
	}
	switch e.Type {
	case proxystatus.DestinationNotFound, proxystatus.DNSError, proxystatus.DestinationIPUnroute:
		return socks5.HostUnreachable
	case proxystatus.ConnectionRefused:
		return socks5.ConnectionRefused
	case proxystatus.DNSTimeout, proxystatus.ConnectionTimeout:
		return socks5.TTLExpired
	case proxystatus.HTTPRequestDenied, proxystatus.DestinationIPProhibit, proxystatus.ProxyLoopDetected:
		return socks5.NotAllowed
	case proxystatus.ConnectionLimitReached:
		return socks5.GeneralFailure
	}
	return socks5.GeneralFailure
}

// refuseLinger bounds how long a refused plain-HTTP client may keep
// sending after its error response, so it reads the answer instead of a
// reset.
const refuseLinger = 2 * time.Second

// transparentSide is a redirected connection's part in the tail: no
// answer but an HTTP client's refusal; the sniffed bytes go first.
type transparentSide struct {
	s   *Server
	ctx context.Context
	c   net.Conn
	l   *lease // the connection's slots
	res *sniff.Result
}

func (ts *transparentSide) refuse(ev *event, e *proxystatus.Error, _ error) {
	ts.s.refuseTransparent(ts.ctx, ev, ts.c, ts.res.Proto, e)
}

func (ts *transparentSide) hand(sc *Conn) { sc.lease.take(ts.l) }

func (ts *transparentSide) established(more []byte) ([]byte, *proxystatus.Error) {
	return append(ts.res.Peeked, more...), nil
}

// refuseTransparent ends a redirected connection that cannot be served.
// A plain-HTTP client gets the error as an HTTP response with
// Proxy-Status; TLS and unknown protocols have no channel for it and are
// closed. The log line carries the Proxy-Status type either way.
func (s *Server) refuseTransparent(ctx context.Context, ev *event, c net.Conn, proto sniff.Proto, e *proxystatus.Error) {
	answered := false
	if proto == sniff.HTTP {
		c.SetWriteDeadline(time.Now().Add(refuseLinger))
		answered = proxystatus.WriteRaw(c, e, true) == nil
	}
	s.failRaw(ctx, ev, e, e.Code())
	if answered {
		lingerClose(c)
	}
	c.Close()
}

// lingerClose half-closes c and discards what the client still sends for
// a moment, so it reads the answer rather than a reset.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(refuseLinger))
	io.Copy(io.Discard, io.LimitReader(c, 256<<10))
}

// failRaw logs a connection of a raw listener (transparent, SOCKS5) that
// ended with e. status is what the log and metrics record: the HTTP status
// an explicit client would have received (e.Code()), or 0 when the client
// went away.
func (s *Server) failRaw(ctx context.Context, ev *event, e *proxystatus.Error, status int) {
	ev.err, ev.status = e, status
	s.finish(ev)
}

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/relay"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

// Forwarding limits, as net/http's Transport had them.
const (
	maxResponseHeaderBytes = 256 << 10
	expectContinueTimeout  = time.Second
	tlsHandshakeTimeout    = 10 * time.Second
	max1xxResponses        = 5
)

// bodyKind is how a request's body is framed.
type bodyKind uint8

const (
	bodyNone    bodyKind = iota
	bodyLength           // Content-Length bytes
	bodyChunked          // chunked transfer coding
)

// exchange is one forwarded request: the client's request, the attempts to
// send it, and the response streamed back. A client connection reuses one.
type exchange struct {
	cc         *clientConn
	ctx        context.Context // the request's: cancelled when its client leaves while it waits
	req        *http.Request
	ev         event
	st         *State
	dest       route.Dest
	scheme     string
	idempotent bool

	body    bodyKind
	cl      int64  // the Content-Length body's size
	cl0     bool   // send "Content-Length: 0" (a request without a body that said so, or whose method expects one)
	expect  bool   // the client waits for 100 Continue before its body
	upgrade string // the protocol the client asks to switch to
	te      bool   // the client accepts trailers
	lenBuf  [20]byte

	// started is set once bytes of the body were taken from the client:
	// the request cannot be sent again. An inline body (small, already
	// buffered) stays in the client's reader until an answer is chosen.
	started   bool
	inline    bool
	skipped   bool // the origin answered before asking for the body
	continued bool // 100 Continue was sent to the client
	copier    *bodyCopier

	cred *credentials.Credential // for a tunnel through the member being tried
	// waiting is the origin connection whose response header is awaited,
	// for interruptOrigin.
	waiting atomic.Pointer[originConn]
	// writeDeadline is set once copyResponse put a write deadline on the
	// client connection; respond clears it.
	writeDeadline bool
	oc            *originConn
	gotByte       bool   // the current attempt received bytes of a response
	release       func() // the member's request count
	// breaker is set while the destination's breaker awaits the outcome:
	// it is told before the client is answered, so the client's next
	// request already meets the breaker's new state.
	breaker bool
}

// reportDest tells the destination's breaker the outcome, once.
func (x *exchange) reportDest(err error) {
	if x.breaker {
		x.breaker = false
		x.cc.s.reportDest(x.dest, err)
	}
}

// forward serves an absolute-URI request; it reports whether the client
// connection may carry another request.
func (cc *clientConn) forward(req *http.Request) bool {
	s := cc.s
	x := &cc.x
	*x = exchange{cc: cc, req: req}
	ev := &x.ev
	*ev = event{kind: metrics.KindHTTP, client: cc.remote, method: req.Method, dest: scrubHost(req.URL.Host), start: time.Now()}
	var defPort uint16
	switch x.scheme = req.URL.Scheme; x.scheme {
	case "http":
		defPort = 80
	case "https":
		defPort = 443
	default:
		return cc.fail(req, ev, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "unsupported URL scheme " + proxystatus.Scrub(strconv.Quote(x.scheme)) + ": egret forwards http:// and https:// URLs, and tunnels anything with CONNECT"}, false)
	}
	if s.alog != nil {
		ev.url = x.scheme + "://" + scrubHost(req.URL.Host) + req.URL.EscapedPath() // no query: it may hold tokens
	}
	a, e := s.admit(s.ctx, ev, &target{hostport: req.URL.Host, defPort: defPort, via: req.Header["Via"]})
	if e != nil {
		return cc.fail(req, ev, e, false)
	}
	x.st, x.dest, x.breaker = a.st, a.dest, a.breaker
	if e := x.prepare(); e != nil {
		return cc.fail(req, ev, e, false)
	}
	// While a request without a body waits on the far side, its client is
	// watched: one that leaves cancels the wait. (A body's copy reads the
	// client itself.)
	x.ctx = s.ctx
	var stop func() ([]byte, bool)
	if x.body == bodyNone {
		x.ctx, stop = watchClient(s.ctx, cc.c, cc.peek, cc.interruptOrigin)
	}
	resp, err := x.roundTrip()
	if stop != nil {
		if _, gone := stop(); gone {
			// Nobody waits for the answer; the origin connection may
			// hold an interrupted read.
			resp, err = nil, clientGone(errClientLeft)
			x.dropOrigin()
		}
	}
	var keep bool
	var destErr error
	if err != nil {
		keep, destErr = x.failed(err)
	} else {
		keep = x.respond(resp)
		if x.ev.err != nil && !isClientGone(x.ev.err) {
			destErr = x.ev.err
		}
	}
	if x.release != nil {
		x.release()
	}
	x.reportDest(destErr)
	if cc.handedOff {
		return false // a tunnel now; it logs when it ends
	}
	ev.timed = true
	s.finishWith(ev, &cc.meters)
	return keep
}

// prepare readies the request header for the next hop: hop-by-hop fields
// out (RFC 9110 section 7.6.1), and notes the body, the expectation, the
// upgrade and trailers.
func (x *exchange) prepare() *proxystatus.Error {
	req := x.req
	h := req.Header
	x.idempotent = isIdempotent(req)
	switch {
	case len(req.TransferEncoding) > 0:
		x.body = bodyChunked
	case req.ContentLength > 0:
		x.body, x.cl = bodyLength, req.ContentLength
	default:
		_, said := h["Content-Length"]
		x.cl0 = said || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch
	}
	if httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") {
		x.upgrade = h.Get("Upgrade")
		if !printable(x.upgrade) {
			return &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "invalid Upgrade protocol"}
		}
		if x.body != bodyNone {
			x.upgrade = "" // a request with a body is not switched over
		}
	}
	x.te = httpguts.HeaderValuesContainsToken(h["Te"], "trailers")
	if _, ok := h["Expect"]; ok {
		// readRequest let only 100-continue through. It is honoured for
		// an HTTP/1.1 client that has a body to send, and dropped
		// otherwise (RFC 9110 section 10.1.1).
		if req.ProtoAtLeast(1, 1) && x.body != bodyNone {
			x.expect = true
		} else {
			delete(h, "Expect")
		}
	}
	removeHopByHop(h)
	return nil
}

// roundTrip sends the request directly or through the members of its pool
// in turn and returns the final response (its header read, 1xx answers
// passed on). A failing member is skipped only while the body can still
// be sent again, so a request is never sent twice: failures before the
// request reached the origin (the member could not be reached, or refused
// it with 407/403) move on for any method; other failures (timeouts, a
// member's 5xx) only for idempotent requests.
func (x *exchange) roundTrip() (*http.Response, error) {
	if x.ev.dec.Action != route.Upstream {
		resp, err := x.attempt(originKey{scheme: x.scheme, addr: x.ev.dest}, nil, "")
		if err != nil {
			return nil, originErr(err, nil)
		}
		return resp, nil
	}
	s := x.cc.s
	p := x.st.pool(x.ev.dec.Pool)
	if p == nil {
		return nil, &proxystatus.Error{Type: proxystatus.ProxyConfigurationErr, Detail: fmt.Sprintf("route names pool %q, which does not exist", x.ev.dec.Pool)}
	}
	// Another member, or the previous credential, may be tried while the
	// body can still be sent again and the request certainly did not
	// reach the origin, or may reach it twice.
	again := func(err error) bool { return !x.started && (x.idempotent || notSent(err)) }
	var resp *http.Response
	_, err := p.Do(x.ctx, x.dest.Host, again, func(_ context.Context, m *upstream.Member, cred *credentials.Credential, more bool) (int, error) {
		x.ev.member = m.Name
		start := time.Now()
		r, code, err := x.tryMember(p, m, cred, more && x.idempotent)
		if err == nil {
			x.ev.connect, resp = time.Since(start), r
		}
		return code, err
	})
	if err != nil {
		if pe := proxystatus.From(err); pe.Type == proxystatus.PoolUnavailable {
			s.countUpstreamErr(p.Name, err)
		}
		return nil, err
	}
	return resp, nil
}

// tryMember sends the request through m with cred, once (Pool.Do owns
// the failover and the credential fallback). Through an http(s) member a
// plain-HTTP request goes in absolute form with cred in
// Proxy-Authorization; an https:// request, and any request through a
// socks5 member, goes through a tunnel to the origin opened with cred. It
// returns the member's status code (0 when it did not answer). A 407 is an
// error; so is a refusal the member wrote itself (403 or 5xx with Squid's
// X-Squid-Error) when failover may follow (mayRetry), which otherwise goes
// to the client as it is. A member that took the request and sent no
// response header in time is a *upstream.Silence.
func (x *exchange) tryMember(p *upstream.Pool, m *upstream.Member, cred *credentials.Credential, mayRetry bool) (*http.Response, int, error) {
	release := m.Acquire()
	var resp *http.Response
	var err error
	if x.scheme == "https" || m.URL.Scheme == upstream.SchemeSOCKS5 {
		x.cred = cred
		resp, err = x.attempt(originKey{member: m, scheme: x.scheme, addr: x.ev.dest}, p, "")
	} else {
		resp, err = x.attempt(originKey{member: m}, p, authOf(cred))
		if err == nil && resp.StatusCode == http.StatusProxyAuthRequired {
			err, resp = upstream.RefusalError(m.Name, resp), nil
			x.dropOrigin()
		}
	}
	if err != nil {
		release()
		err = originErr(err, m)
		if pe := proxystatus.From(err); pe.Type == proxystatus.ConnectionReadTimeout && !x.gotByte && refusalCode(err) == 0 {
			out := *pe
			out.Upstream = m.Name
			err = &upstream.Silence{Err: &out}
		}
		return nil, refusalCode(err), err
	}
	if mayRetry && !x.started && memberWrote(resp) {
		rerr := upstream.RefusalError(m.Name, resp)
		x.dropOrigin()
		release()
		return nil, resp.StatusCode, rerr
	}
	x.release = release
	return resp, resp.StatusCode, nil
}

// interruptOrigin ends the wait for a response header of the client's
// request (its client left).
func (cc *clientConn) interruptOrigin() {
	if oc := cc.x.waiting.Load(); oc != nil {
		oc.conn.SetReadDeadline(aLongTimeAgo)
	}
}

// authOf is the Proxy-Authorization value for c, "" for none.
func authOf(c *credentials.Credential) string {
	if c == nil {
		return ""
	}
	return c.AuthHeader()
}

// attempt sends the request on a pooled connection for key, or a new one.
// A pooled connection that fails before any answer (the other side closed
// it while it idled) is replaced by a new one when that is safe: the
// request did not reach the origin (writing it failed), or it is
// idempotent, and its body can still be sent.
func (x *exchange) attempt(key originKey, p *upstream.Pool, auth string) (*http.Response, error) {
	pool := x.cc.s.origins
	for try := 0; ; try++ {
		var oc *originConn
		if try == 0 {
			oc = pool.get(key, !x.idempotent)
		}
		if oc == nil {
			var err error
			if oc, err = x.dial(key, p, pool.gen.Load()); err != nil {
				return nil, err
			}
		}
		resp, err := x.send(oc, key.member != nil && key.scheme == "", auth)
		if err == nil {
			return resp, nil
		}
		x.dropOrigin()
		var we *sendWriteError
		if isClientGone(err) {
			return nil, err
		}
		// A reused connection the other side had closed fails at once; a
		// timeout is no such thing, and is not waited out twice.
		if oc.reused && !x.gotByte && !x.started && try == 0 && (x.idempotent || errors.As(err, &we)) && !errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if errors.As(err, &we) {
			err = we.err
		}
		return nil, err
	}
}

// dial connects for key: to the origin directly, to an http(s) member, or
// to the origin through a member's tunnel; TLS to an https origin.
func (x *exchange) dial(key originKey, p *upstream.Pool, gen uint64) (*originConn, error) {
	s := x.cc.s
	switch {
	case key.member == nil:
		c, err := s.dialDirect(x.ctx, x.st, x.dest, x.ev.dec)
		if err != nil {
			return nil, err
		}
		return x.originTLS(c, c, key, gen)
	case key.scheme == "":
		timeout := p.ConnectTimeout
		if timeout <= 0 {
			timeout = upstream.DefaultConnectTimeout
		}
		ctx, cancel := context.WithTimeout(x.ctx, timeout)
		defer cancel()
		c, err := p.DialMember(ctx, key.member)
		if err != nil {
			return nil, err
		}
		return newOriginConn(c, rawConn(c), key, gen), nil
	}
	t, _, err := p.OpenTunnel(x.ctx, key.member, key.addr, x.cred)
	if err != nil {
		return nil, err
	}
	var c net.Conn = t.Conn
	if len(t.Prefix) > 0 {
		c = &prefixConn{Conn: c, prefix: t.Prefix}
	}
	return x.originTLS(c, rawConn(t.Conn), key, gen)
}

// originTLS makes c an origin connection, with TLS for an https origin.
func (x *exchange) originTLS(c, raw net.Conn, key originKey, gen uint64) (*originConn, error) {
	if x.scheme != "https" {
		return newOriginConn(c, raw, key, gen), nil
	}
	s := x.cc.s
	cfg := &tls.Config{}
	if s.opts.OriginTLS != nil {
		cfg = s.opts.OriginTLS.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = x.dest.Host
	}
	tc := tls.Client(c, cfg)
	ctx, cancel := context.WithTimeout(x.ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		t := proxystatus.TLSProtocolError
		var ce *tls.CertificateVerificationError
		if errors.As(err, &ce) {
			t = proxystatus.TLSCertificateError
		}
		return nil, &proxystatus.Error{Type: t, Detail: "TLS to " + x.ev.dest + ": " + err.Error(), Err: err}
	}
	return newOriginConn(tc, raw, key, gen), nil
}

// rawConn returns the socket beneath a TLS connection.
func rawConn(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}

// sendWriteError is a failure to write the request: it cannot have been
// served.
type sendWriteError struct{ err error }

func (e *sendWriteError) Error() string { return e.err.Error() }
func (e *sendWriteError) Unwrap() error { return e.err }

// send writes the request on oc and reads the response header, passing
// 1xx answers on. A small body that has fully arrived goes with the
// header; a larger one is copied by its own goroutine (bodyCopier) while
// the response is read, so both can stream at once. With Expect:
// 100-continue the body waits for the origin's 100 (passed on to the
// client), or for a second without an answer.
func (x *exchange) send(oc *originConn, absolute bool, auth string) (*http.Response, error) {
	cc := x.cc
	x.oc, x.gotByte, x.skipped = oc, false, false
	start := oc.lr.n
	x.writeHeader(oc.bw, absolute, auth)
	wait := false
	switch {
	case x.body == bodyNone:
	case x.expect:
		wait = !x.continued
	case x.body == bodyLength && x.cl <= int64(cc.br.Buffered()):
		p, _ := cc.br.Peek(int(x.cl))
		oc.bw.Write(p)
		x.inline = true
	}
	if err := oc.bw.Flush(); err != nil {
		return nil, &sendWriteError{err}
	}
	if x.body != bodyNone && !x.inline && !wait {
		x.startCopier()
	}
	hdrTimeout := positive(cc.s.opts.Timeouts.ResponseHeader)
	for n1xx := 0; ; {
		if wait {
			oc.conn.SetReadDeadline(time.Now().Add(expectContinueTimeout))
			_, err := oc.br.Peek(1)
			oc.conn.SetReadDeadline(time.Time{})
			if err != nil && oc.lr.n == start && errors.Is(err, os.ErrDeadlineExceeded) {
				// No answer: the origin does not do 100-continue. Let the
				// client send its body.
				wait = false
				if err := x.continueClient(); err != nil {
					return nil, err
				}
				x.startCopier()
				continue
			}
			if err != nil {
				x.gotByte = oc.lr.n > start
				return nil, err
			}
		}
		// The client's watch (its cancel comes first) interrupts the
		// read below through x.waiting.
		x.waiting.Store(oc)
		if hdrTimeout > 0 {
			oc.conn.SetReadDeadline(time.Now().Add(hdrTimeout))
		}
		if x.ctx.Err() != nil {
			x.waiting.Store(nil)
			return nil, clientGone(errClientLeft)
		}
		oc.lr.limit(maxResponseHeaderBytes)
		resp, err := http.ReadResponse(oc.br, x.req)
		oc.lr.unlimit()
		x.waiting.Store(nil)
		x.gotByte = oc.lr.n > start
		if hdrTimeout > 0 {
			oc.conn.SetReadDeadline(time.Time{})
		}
		if err != nil && x.ctx.Err() != nil {
			return nil, clientGone(errClientLeft)
		}
		if err != nil {
			switch {
			case oc.lr.hit:
				return nil, &proxystatus.Error{Type: proxystatus.HTTPResponseHeaderSize, Detail: "response header section larger than " + strconv.Itoa(maxResponseHeaderBytes) + " bytes"}
			case hdrTimeout > 0 && errors.Is(err, os.ErrDeadlineExceeded):
				return nil, &proxystatus.Error{Type: proxystatus.ConnectionReadTimeout, Detail: "no response header within " + hdrTimeout.String(), Err: err}
			}
			return nil, err
		}
		code := resp.StatusCode
		if code < 100 || code >= 200 || code == http.StatusSwitchingProtocols {
			x.skipped = wait
			return resp, nil
		}
		if n1xx++; n1xx > max1xxResponses {
			return nil, &proxystatus.Error{Type: proxystatus.HTTPProtocolError, Detail: "too many 1xx responses"}
		}
		if code == http.StatusContinue {
			if wait {
				wait = false
				if err := x.continueClient(); err != nil {
					return nil, err
				}
				x.startCopier()
			}
			continue // an unasked-for 100 is dropped
		}
		if x.req.ProtoAtLeast(1, 1) {
			if err := x.write1xx(resp); err != nil {
				return nil, err
			}
		}
	}
}

// writeHeader writes the request line and header for the next hop:
// origin form to an origin, absolute form (with the member's credential)
// to an http(s) member.
func (x *exchange) writeHeader(bw interface {
	io.Writer
	io.StringWriter
	io.ByteWriter
}, absolute bool, auth string) {
	req := x.req
	s := x.cc.s
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	if absolute {
		bw.WriteString(x.scheme)
		bw.WriteString("://")
		bw.WriteString(req.URL.Host)
	}
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(req.URL.Host)
	bw.WriteString("\r\n")
	req.Header.Write(bw)
	bw.WriteString("Via: ")
	bw.WriteString(s.via(req.ProtoMajor, req.ProtoMinor))
	bw.WriteString("\r\n")
	// Framing is egret's own: from the body it sends, never from what
	// header fields survived (removeHopByHop took them out).
	switch {
	case x.body == bodyChunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
		if len(req.Trailer) > 0 {
			writeTrailerNames(bw, req.Trailer)
		}
	case x.body == bodyLength:
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(x.lenBuf[:0], x.cl, 10))
		bw.WriteString("\r\n")
	case x.cl0:
		bw.WriteString("Content-Length: 0\r\n")
	}
	if x.te {
		bw.WriteString("Te: trailers\r\n")
	}
	if x.upgrade != "" {
		bw.WriteString("Connection: Upgrade\r\nUpgrade: ")
		bw.WriteString(x.upgrade)
		bw.WriteString("\r\n")
	}
	if auth != "" {
		bw.WriteString("Proxy-Authorization: ")
		bw.WriteString(auth)
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
}

// writeTrailerNames announces trailer fields.
func writeTrailerNames(w io.StringWriter, t http.Header) {
	w.WriteString("Trailer: ")
	first := true
	for k := range t {
		if !first {
			w.WriteString(", ")
		}
		first = false
		w.WriteString(k)
	}
	w.WriteString("\r\n")
}

// writeTrailers writes the trailer section of a chunked message (after
// its last chunk) and its final empty line.
func writeTrailers(w io.StringWriter, t http.Header) {
	for k, vv := range t {
		if isHopByHop(k) || k == "Content-Length" || k == "Host" {
			continue
		}
		for _, v := range vv {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	w.WriteString("\r\n")
}

// continueClient tells the client to send its body.
func (x *exchange) continueClient() error {
	x.continued = true
	bw := x.cc.bw
	bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	if err := bw.Flush(); err != nil {
		return clientGone(err)
	}
	return nil
}

// writeResponseHead writes resp's status line and its header without the
// hop-by-hop fields (and without the blank line that ends the header).
func writeResponseHead(bw *bufio.Writer, resp *http.Response) {
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(statusText(resp))
	bw.WriteString("\r\n")
	removeHopByHop(resp.Header)
	resp.Header.Write(bw)
}

// headerLength is the value of h's Content-Length field (which
// http.ReadResponse validated), or -1.
func headerLength(h http.Header) int64 {
	v := h["Content-Length"]
	if len(v) == 0 {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// write1xx passes an interim response on to the client.
func (x *exchange) write1xx(resp *http.Response) error {
	bw := x.cc.bw
	writeResponseHead(bw, resp)
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		return clientGone(err)
	}
	return nil
}

// clientGoneDetail marks the errors of clientGone.
const clientGoneDetail = "client went away"

// clientGone wraps a failure to write to the client.
func clientGone(err error) *proxystatus.Error {
	return &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: clientGoneDetail, Err: err}
}

// isClientGone reports whether err is a clientGone error.
func isClientGone(err error) bool {
	var pe *proxystatus.Error
	return errors.As(err, &pe) && pe.Type == proxystatus.ConnectionTerminated && pe.Detail == clientGoneDetail
}

// dropOrigin closes the current origin connection: it cannot carry
// another request.
func (x *exchange) dropOrigin() {
	if x.oc != nil {
		x.oc.close()
		x.oc = nil
	}
}

// bodyCopier copies a request body from the client to the origin in its
// own goroutine. Its results may be read once done is closed.
type bodyCopier struct {
	done     chan struct{}
	oc       *originConn
	n        int64
	rerr     error // reading the client's body failed
	werr     error // writing to the origin failed
	complete bool  // the whole body was sent
	aborted  atomic.Bool
}

// cutOff reports whether the copy's read error is the interruption
// endCopier caused, not the client's own failure. A copy that failed on its
// own (a broken chunk, say) may be marked aborted too: it closes the origin
// connection, the response read fails, and endCopier can run before the
// copy's goroutine has finished.
func (bc *bodyCopier) cutOff() bool {
	return bc.aborted.Load() && errors.Is(bc.rerr, os.ErrDeadlineExceeded)
}

func (x *exchange) startCopier() {
	x.started = true
	bc := &bodyCopier{done: make(chan struct{}), oc: x.oc}
	x.copier = bc
	go x.copyBody(bc)
}

// copyBody is the copier's goroutine. A client that fails to deliver its
// body (it left, or broke the chunked coding) ends the origin connection
// too, so the origin does not wait for the rest.
func (x *exchange) copyBody(bc *bodyCopier) {
	defer close(bc.done)
	br, ow := x.cc.br, bc.oc.bw
	bufp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bufp)
	buf := *bufp
	var cw io.WriteCloser
	remain := x.cl
	// A client that stalls in its body is cut off after the idle timeout:
	// each read that waits on the socket has its own deadline (set before
	// the abort flag is checked, so endCopier's interruption is not lost).
	idle := positive(x.cc.s.opts.Timeouts.ClientIdle)
	stalls := false
	defer func() {
		if stalls && bc.rerr == nil {
			x.cc.c.SetReadDeadline(time.Time{})
		}
	}()
	for {
		var n int
		var err error
		if idle > 0 && br.Buffered() == 0 {
			x.cc.c.SetReadDeadline(time.Now().Add(idle))
			stalls = true
			if bc.aborted.Load() {
				bc.rerr = os.ErrDeadlineExceeded
				return
			}
		}
		if x.body == bodyChunked {
			n, err = x.req.Body.Read(buf)
		} else {
			p := buf
			if int64(len(p)) > remain {
				p = p[:remain]
			}
			n, err = br.Read(p)
			remain -= int64(n)
			if err == nil && remain == 0 {
				err = io.EOF
			} else if err == io.EOF && remain > 0 {
				err = io.ErrUnexpectedEOF
			}
		}
		if n > 0 {
			bc.n += int64(n)
			x.ev.up = bc.n
			var werr error
			if x.body == bodyChunked {
				if cw == nil {
					cw = httputil.NewChunkedWriter(ow)
				}
				_, werr = cw.Write(buf[:n])
			} else {
				_, werr = ow.Write(buf[:n])
			}
			if werr != nil {
				bc.werr = werr
				return
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			bc.rerr = err
			bc.oc.conn.Close()
			return
		}
		if br.Buffered() == 0 {
			if err := ow.Flush(); err != nil {
				bc.werr = err
				return
			}
		}
	}
	if x.body == bodyChunked {
		ow.WriteString("0\r\n")
		writeTrailers(ow, x.req.Trailer)
	}
	if err := ow.Flush(); err != nil {
		bc.werr = err
		return
	}
	bc.complete = true
}

// endCopier waits for the body copy. An exchange that is over before the
// body was sent (the origin answered without reading it all, or failed)
// cuts the copy off: the client's reads are interrupted and the origin
// connection is closed.
func (x *exchange) endCopier() {
	bc := x.copier
	if bc == nil {
		return
	}
	select {
	case <-bc.done:
		return
	default:
	}
	runtime.Gosched() // the copy may be finishing its last write
	select {
	case <-bc.done:
		return
	default:
	}
	bc.aborted.Store(true)
	x.cc.c.SetReadDeadline(aLongTimeAgo)
	bc.oc.conn.Close()
	<-bc.done
	if bc.complete {
		x.cc.c.SetReadDeadline(time.Time{}) // it finished after all
	}
}

// bodyDone reports whether the client's request body has been read
// completely (or there was none), so the connection may carry another
// request.
func (x *exchange) bodyDone() bool {
	switch {
	case x.body == bodyNone:
		return true
	case x.inline:
		return true
	case x.copier != nil:
		return x.copier.complete
	}
	return false
}

// consumeInline takes an inline body out of the client's reader once the
// answer is settled.
func (x *exchange) consumeInline() {
	if x.inline {
		x.cc.br.Discard(int(x.cl))
		x.ev.up = x.cl
	}
}

// failed answers a request that got no response. It returns whether the
// client connection may carry another request, and the failure to report
// to the destination's breaker (nil when it was the client's).
func (x *exchange) failed(err error) (bool, error) {
	cc := x.cc
	x.endCopier()
	x.dropOrigin()
	x.consumeInline()
	if bc := x.copier; bc != nil && bc.rerr != nil && !bc.cutOff() {
		// The request body failed on the client's side.
		if errors.Is(bc.rerr, os.ErrDeadlineExceeded) {
			x.ev.err = &proxystatus.Error{Type: proxystatus.HTTPRequestError, Status: http.StatusRequestTimeout,
				Detail: "the request body stalled: nothing arrived for " + x.cc.s.opts.Timeouts.ClientIdle.String(), Err: bc.rerr}
			x.ev.status = x.ev.err.Code()
			writeError(cc.bw, x.ev.err, true, false)
			return false, nil
		}
		if isNetReadError(bc.rerr) || errors.Is(bc.rerr, io.ErrUnexpectedEOF) {
			x.ev.err = &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: "client went away while sending the request body", Err: bc.rerr}
			return false, nil
		}
		x.ev.err = &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "request body: " + bc.rerr.Error(), Err: bc.rerr}
		x.ev.status = x.ev.err.Code()
		writeError(cc.bw, x.ev.err, true, false)
		return false, nil
	}
	pe := proxystatus.From(err)
	if isClientGone(pe) {
		x.ev.err = pe
		return false, nil
	}
	x.ev.err, x.ev.status = pe, pe.Code()
	x.reportDest(err)
	keep := !x.req.Close && x.req.ProtoAtLeast(1, 1) && !cc.s.draining.Load() && x.bodyDone()
	if writeError(cc.bw, pe, !keep, x.req.Method == http.MethodHead) != nil {
		keep = false
	}
	return keep, err
}

// respond streams the response to the client and reports whether the
// client connection may carry another request. Failures are recorded in
// the event; once the response has started, a failure aborts the
// connection, never a second status.
func (x *exchange) respond(resp *http.Response) bool {
	cc, s, req := x.cc, x.cc.s, x.req
	x.consumeInline()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return x.switchProtocols(resp)
	}
	code := resp.StatusCode
	bodyless := req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	client11 := req.ProtoAtLeast(1, 1)
	closeAfter := req.Close || s.draining.Load() || (x.skipped && x.body != bodyNone)
	chunked := false
	if !bodyless && resp.ContentLength < 0 {
		if client11 {
			chunked = true // chunked stays chunked; an unknown length becomes chunked
		} else {
			closeAfter = true // HTTP/1.0: the end of the body is the end of the connection
		}
	}
	// The length egret sends is the length of the body it sends (HEAD and
	// 304 answers describe the representation instead): never a
	// Content-Length field that survived header edits.
	length := int64(-1)
	switch {
	case chunked:
	case !bodyless && resp.ContentLength >= 0:
		length = resp.ContentLength
	case bodyless && code != http.StatusNoContent:
		length = headerLength(resp.Header)
	}
	bw := cc.bw
	writeResponseHead(bw, resp)
	bw.WriteString("Via: ")
	bw.WriteString(s.via(resp.ProtoMajor, resp.ProtoMinor))
	bw.WriteString("\r\n")
	if length >= 0 {
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(x.lenBuf[:0], length, 10))
		bw.WriteString("\r\n")
	}
	if _, ok := resp.Header["Date"]; !ok {
		// RFC 9110 section 6.6.1: a recipient with a clock adds it.
		bw.WriteString("Date: ")
		bw.Write(appendDate(bw.AvailableBuffer()))
		bw.WriteString("\r\n")
	}
	if chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
		if len(resp.Trailer) > 0 {
			writeTrailerNames(bw, resp.Trailer)
		}
	}
	switch {
	case closeAfter && client11:
		bw.WriteString("Connection: close\r\n")
	case !closeAfter && !client11:
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")
	x.ev.status = code
	var rerr, werr error
	if bodyless || resp.Body == http.NoBody {
		if chunked {
			bw.WriteString("0\r\n\r\n")
		}
	} else {
		rerr, werr = x.copyResponse(resp, chunked)
	}
	x.endCopier()
	if rerr == nil && werr == nil {
		// The response is read: the origin connection can serve another
		// client while this one's last bytes go out.
		x.releaseOrigin(resp)
		werr = bw.Flush()
	}
	switch {
	case werr != nil:
		x.ev.err = clientGone(werr)
		x.dropOrigin()
		return false
	case rerr != nil:
		pe := *proxystatus.From(rerr)
		pe.Type, pe.Detail = proxystatus.HTTPResponseIncomplete, "response body: "+pe.Detail
		x.ev.err = &pe
		x.dropOrigin()
		return false
	}
	if x.writeDeadline {
		cc.c.SetWriteDeadline(time.Time{})
	}
	return !closeAfter && x.bodyDone()
}

// releaseOrigin pools the origin connection after a clean exchange (the
// whole request sent, the whole response read, nothing more waiting, no
// close asked for) and closes it otherwise.
func (x *exchange) releaseOrigin(resp *http.Response) {
	oc := x.oc
	if oc == nil {
		return
	}
	if resp.Close || x.skipped || !x.bodyDone() || oc.br.Buffered() > 0 {
		x.dropOrigin()
		return
	}
	x.oc = nil
	x.cc.s.origins.put(oc)
}

// copyResponse streams the response body to the client, re-framed as
// respond decided, flushing whenever the origin has nothing more at hand.
// It returns the origin's (read) and the client's (write) failure.
func (x *exchange) copyResponse(resp *http.Response, chunked bool) (rerr, werr error) {
	bw, obr := x.cc.bw, x.oc.br
	var cw io.WriteCloser
	var w io.Writer = bw
	if chunked {
		cw = httputil.NewChunkedWriter(bw)
		w = cw
	}
	var bufp *[]byte
	defer func() {
		if bufp != nil {
			copyPool.Put(bufp)
		}
	}()
	// A client that stops reading a long answer is cut off after the idle
	// timeout: writes that reach the socket run under a deadline, moved on
	// at most once a second.
	idle := positive(x.cc.s.opts.Timeouts.ClientIdle)
	var deadlineAt time.Time
	progress := func() {
		if idle > 0 {
			if now := time.Now(); now.Sub(deadlineAt) > time.Second {
				deadlineAt = now
				x.cc.c.SetWriteDeadline(now.Add(idle))
				x.writeDeadline = true
			}
		}
	}
	for {
		var p []byte
		if !chunked && bufp == nil && bw.Available() >= 1024 {
			// A small body goes into the header's write.
			p = bw.AvailableBuffer()
			p = p[:cap(p)]
		} else {
			if bufp == nil {
				bufp = copyPool.Get().(*[]byte)
			}
			p = *bufp
		}
		n, err := resp.Body.Read(p)
		if n > 0 {
			x.ev.down += int64(n)
			if n > bw.Available() {
				progress() // this write reaches the socket
			}
			if _, e := w.Write(p[:n]); e != nil {
				return nil, e
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err, nil
		}
		if obr.Buffered() == 0 && bw.Buffered() > 0 {
			progress()
			if e := bw.Flush(); e != nil {
				return nil, e
			}
		}
	}
	if chunked {
		bw.WriteString("0\r\n")
		writeTrailers(bw, resp.Trailer)
	}
	return nil, nil // the caller flushes
}

// switchProtocols answers an upgrade the origin accepted and relays both
// connections as a tunnel from then on.
func (x *exchange) switchProtocols(resp *http.Response) bool {
	cc, s := x.cc, x.cc.s
	if x.upgrade == "" || !strings.EqualFold(resp.Header.Get("Upgrade"), x.upgrade) {
		x.endCopier()
		x.dropOrigin()
		e := &proxystatus.Error{Type: proxystatus.HTTPProtocolError,
			Detail: fmt.Sprintf("origin switched to protocol %q when %q was asked for", resp.Header.Get("Upgrade"), x.upgrade)}
		x.ev.err, x.ev.status = e, e.Code()
		writeError(cc.bw, e, true, false)
		return false
	}
	bw := cc.bw
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(statusText(resp))
	bw.WriteString("\r\n")
	resp.Header.Write(bw)
	bw.WriteString("Via: ")
	bw.WriteString(s.via(resp.ProtoMajor, resp.ProtoMinor))
	bw.WriteString("\r\n\r\n")
	x.ev.status = resp.StatusCode
	if err := bw.Flush(); err != nil {
		x.ev.err = clientGone(err)
		x.dropOrigin()
		return false
	}
	cc.c.SetReadDeadline(time.Time{})
	oc := x.oc
	x.oc = nil
	sc := &Conn{Conn: oc.conn, Prefix: buffered(oc.br), Member: nil}
	oc.detach()
	if x.release != nil {
		sc.release.add(x.release)
		x.release = nil
	}
	ev := new(event)
	*ev = x.ev
	x.ev.release = nil
	s.observeSetup(ev)
	t := relay.New(cc.c, sc.Conn)
	s.addTunnel(t, ev.kind)
	cc.handOff(ev)
	s.start(ev, t, buffered(cc.br), sc)
	return false
}

// originErr classifies a failure on the way to an origin, naming the
// member m (if any) when reaching it failed; failures after the member
// was reached are the origin's (or the member's relaying of it).
func originErr(err error, m *upstream.Member) error {
	var r *upstream.Refusal
	if errors.As(err, &r) {
		return err
	}
	pe := proxystatus.From(err)
	if pe.Upstream != "" || isClientGone(pe) {
		return pe // a member's own failure, or the client's
	}
	out := *pe
	if m != nil {
		out.Detail = "via upstream " + m.Name + ": " + out.Detail
	}
	if out.Type == proxystatus.ProxyInternalError {
		out.Type = proxystatus.HTTPResponseIncomplete
	}
	return &out
}

// refusalCode is the member's refusal status in err, or 0.
func refusalCode(err error) int {
	var r *upstream.Refusal
	if errors.As(err, &r) {
		return r.Code
	}
	return 0
}

// memberWrote reports whether resp is an error the member wrote itself
// (rather than the origin's answer): 403 or 5xx with Squid's error header.
func memberWrote(resp *http.Response) bool {
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode < 500 {
		return false
	}
	return resp.Header.Get("X-Squid-Error") != ""
}

// notSent reports whether a failed attempt certainly did not reach the
// origin: the member could not be reached or refused the request.
func notSent(err error) bool {
	var sil *upstream.Silence
	if errors.As(err, &sil) {
		return false // it took the request: it may have sent it on
	}
	var r *upstream.Refusal
	if errors.As(err, &r) {
		return r.Code == http.StatusProxyAuthRequired || r.Code == http.StatusForbidden || r.DestinationFault
	}
	// Only failures reaching the member name it.
	return proxystatus.From(err).Upstream != ""
}

// isIdempotent reports whether req may be sent twice (RFC 9110 section
// 9.2.2), also when it carries an Idempotency-Key.
func isIdempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
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

package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/relay"
	"egret.io/egret/internal/transport"
)

// failed answers a request that got no response. It returns whether the
// client connection may carry another request, and the failure to report
// to the destination's breaker (nil when it was the client's).
func (x *exchange) failed(err error) (bool, error) {
	cc := x.cc
	x.EndBody()
	x.Drop()
	x.ConsumeInline()
	if berr := x.BodyError(); berr != nil {
		// The request body failed on the client's side.
		switch {
		case errors.Is(berr, os.ErrDeadlineExceeded):
			x.ev.err = &proxystatus.Error{Type: proxystatus.HTTPRequestError, Status: http.StatusRequestTimeout,
				Detail: "the request body stalled: nothing arrived for " + x.BodyIdle.String(), Err: berr}
		case http1.IsNetReadError(berr) || errors.Is(berr, io.ErrUnexpectedEOF):
			x.ev.err = &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: "client went away while sending the request body", Err: berr}
			return false, nil
		default:
			x.ev.err = &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "request body: " + berr.Error(), Err: berr}
		}
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
	req := x.Req
	keep := !req.Close && req.ProtoAtLeast(1, 1) && !cc.s.draining.Load() && x.BodyDone()
	if writeError(cc.bw, pe, !keep, req.Method == http.MethodHead) != nil {
		keep = false
	}
	return keep, err
}

// respond streams the response to the client and reports whether the
// client connection may carry another request. Failures are recorded in
// the event; once the response has started, a failure aborts the
// connection, never a second status.
func (x *exchange) respond(resp *http.Response) bool {
	cc, s, req := x.cc, x.cc.s, x.Req
	x.ConsumeInline()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return x.switchProtocols(resp)
	}
	code := resp.StatusCode
	bodyless := req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	client11 := req.ProtoAtLeast(1, 1)
	closeAfter := req.Close || s.draining.Load() || (x.Skipped() && x.Framing.Kind != http1.BodyNone)
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
	head := http1.ResponseHead{Via: s.via(resp.ProtoMajor, resp.ProtoMinor), Length: -1, Chunked: chunked,
		Close: closeAfter && client11, KeepAlive: !closeAfter && !client11}
	switch {
	case chunked:
	case !bodyless && resp.ContentLength >= 0:
		head.Length = resp.ContentLength
	case bodyless && code != http.StatusNoContent:
		head.Length = http1.HeaderLength(resp.Header)
	}
	bw := cc.bw
	http1.WriteResponseHead(bw, resp, &head, x.respBuf[:0])
	x.ev.status = code
	var rerr, werr error
	if bodyless || resp.Body == http.NoBody {
		if chunked {
			bw.WriteString("0\r\n\r\n")
		}
	} else {
		rerr, werr, x.writeDeadline = http1.CopyResponse(bw, cc.c, resp, x.Conn.R, chunked, positive(s.opts.Timeouts.ClientIdle), &x.ev.down)
	}
	x.EndBody()
	if rerr == nil && werr == nil {
		// The response is read: the origin connection can serve another
		// client while this one's last bytes go out.
		x.Release(resp)
		werr = bw.Flush()
	}
	switch {
	case werr != nil:
		x.ev.err = clientGone(werr)
		x.Drop()
		return false
	case rerr != nil:
		pe := *proxystatus.From(rerr)
		pe.Type, pe.Detail = proxystatus.HTTPResponseIncomplete, "response body: "+pe.Detail
		x.ev.err = &pe
		x.Drop()
		return false
	}
	if x.writeDeadline {
		cc.c.SetWriteDeadline(time.Time{})
	}
	return !closeAfter && x.BodyDone()
}

// switchProtocols answers an upgrade the origin accepted and relays both
// connections as a tunnel from then on.
func (x *exchange) switchProtocols(resp *http.Response) bool {
	cc, s := x.cc, x.cc.s
	if x.Upgrade == "" || !strings.EqualFold(resp.Header.Get("Upgrade"), x.Upgrade) {
		x.EndBody()
		x.Drop()
		e := &proxystatus.Error{Type: proxystatus.HTTPProtocolError,
			Detail: fmt.Sprintf("origin switched to protocol %q when %q was asked for", resp.Header.Get("Upgrade"), x.Upgrade)}
		x.ev.err, x.ev.status = e, e.Code()
		writeError(cc.bw, e, true, false)
		return false
	}
	http1.WriteSwitch(cc.bw, resp, x.Upgrade, s.via(resp.ProtoMajor, resp.ProtoMinor))
	x.ev.status = resp.StatusCode
	if err := cc.bw.Flush(); err != nil {
		x.ev.err = clientGone(err)
		x.Drop()
		return false
	}
	cc.c.SetReadDeadline(time.Time{})
	c, prefix := x.Hijack()
	sc := &Conn{Conn: c, Prefix: prefix}
	sc.lease.take(&x.lease)
	sc.lease.hold(x.MemberDone)
	x.MemberDone = nil
	ev := new(event)
	*ev = x.ev
	s.observeSetup(ev)
	t := relay.New(cc.c, sc.Conn)
	s.addTunnel(t, ev.kind)
	cc.handOff(sc)
	s.start(ev, t, http1.Buffered(cc.r.Buf()), sc, &cc.relay)
	return false
}

// fail answers req with e, logs ev, and reports whether the connection may
// carry another request: only when req's body (if any) was not started,
// can be skipped, and neither side asked to close. bodyRead says the body
// was read completely.
func (cc *clientConn) fail(req *http.Request, ev *event, e *proxystatus.Error, bodyRead bool) bool {
	ev.err, ev.status = e, e.Code()
	keep := !req.Close && req.ProtoAtLeast(1, 1) && !cc.s.draining.Load() &&
		(bodyRead || req.Body == http.NoBody || req.ContentLength == 0)
	err := writeError(cc.bw, e, !keep, req.Method == http.MethodHead)
	cc.s.finishWith(ev, &cc.meters)
	return keep && err == nil
}

// writeError writes e as a complete response and flushes it; head leaves
// the body out (the answer to a HEAD request).
func writeError(bw *bufio.Writer, e *proxystatus.Error, closeConn, head bool) error {
	if !head {
		if err := proxystatus.WriteRaw(bw, e, closeConn); err != nil {
			return err
		}
		return bw.Flush()
	}
	var b bytes.Buffer
	proxystatus.WriteRaw(&b, e, closeConn)
	out := b.Bytes()
	if i := bytes.Index(out, []byte("\r\n\r\n")); i >= 0 {
		out = out[:i+4]
	}
	bw.Write(out)
	return bw.Flush()
}

// clientGone wraps a failure on the client's side (it left, or writing to
// it failed) as the error logged for it (transport.ClientGoneError).
func clientGone(err error) *proxystatus.Error { return transport.ClientGoneError(err) }

// isClientGone reports whether err is a failure on the client's side.
func isClientGone(err error) bool { return transport.IsClientGone(err) }

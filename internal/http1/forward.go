package http1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"egret.io/egret/internal/proxystatus"
)

// Limits of a forward, as net/http's Transport has them.
const (
	// DefaultMaxResponseHeaderBytes bounds a response header when
	// Forward.MaxResponseHeaderBytes is zero.
	DefaultMaxResponseHeaderBytes = 256 << 10
	// ExpectContinueTimeout is how long a body waits for the origin's 100
	// Continue before it is sent anyway.
	ExpectContinueTimeout = time.Second
	max1xxResponses       = 5
)

// Client is the client's side of a forward.
type Client struct {
	Conn net.Conn      // for deadlines
	R    *bufio.Reader // holds the request body
	W    *bufio.Writer // takes 100 Continue and other interim answers
}

// ClientError is a failure on the client's side of a forward: writing an
// interim answer to it failed, or it left while egret waited (ErrClientLeft).
type ClientError struct{ Err error }

func (e *ClientError) Error() string { return "client: " + e.Err.Error() }
func (e *ClientError) Unwrap() error { return e.Err }

// ErrClientLeft is the cause of a forward given up because the context of
// Send ended: its client went away.
var ErrClientLeft = errors.New("the client closed its connection while egret waited on its behalf")

// WriteError is a failure to write the request on a connection: the
// request cannot have been served there.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// Forward is a client's request on its way to the next hop: the request as
// read, how its body is framed, and the body's state. Attempts may send it
// again (a retry on a new connection, failover to another member) until
// its body has started to go out (Started). The zero value is ready for
// Prepare; a Forward is used by one request at a time.
type Forward struct {
	Req     *http.Request
	Framing Framing
	Expect  bool   // the client waits for 100 Continue before its body
	Upgrade string // the protocol the client asks to switch to ("" none)
	TE      bool   // the client accepts trailers

	Client Client
	// BodyIdle cuts a request body that stalls this long; zero means none.
	BodyIdle time.Duration
	// HeaderTimeout bounds the wait for the response header; zero means
	// none.
	HeaderTimeout time.Duration
	// MaxResponseHeaderBytes bounds a response header; zero means
	// DefaultMaxResponseHeaderBytes.
	MaxResponseHeaderBytes int

	// started is set once bytes of the body were taken from the client.
	// An inline body (small, already buffered) stays in the client's
	// reader until an answer is chosen.
	started   bool
	inline    bool
	skipped   bool // the origin answered before asking for the body
	continued bool // 100 Continue was sent to the client
	gotByte   bool // the last attempt received bytes of a response
	copier    *bodyCopier
	up        atomic.Int64 // body bytes taken from the client
	// waiting is the connection whose response header is awaited, for
	// Interrupt.
	waiting atomic.Pointer[Conn]
	lenBuf  [32]byte
}

// Prepare readies req for the next hop: its hop-by-hop and framing fields
// out (RFC 9110 section 7.6.1, RemoveHopByHop), and its body's framing,
// expectation, upgrade and trailers noted. It refuses an Upgrade that is
// not printable.
func (f *Forward) Prepare(req *http.Request) *proxystatus.Error {
	f.Req = req
	h := req.Header
	f.Framing = RequestFraming(req)
	if httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") {
		f.Upgrade = h.Get("Upgrade")
		if !Printable(f.Upgrade) {
			return &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "invalid Upgrade protocol"}
		}
		if f.Framing.Kind != BodyNone {
			f.Upgrade = "" // a request with a body is not switched over
		}
	}
	f.TE = httpguts.HeaderValuesContainsToken(h["Te"], "trailers")
	if _, ok := h["Expect"]; ok {
		// Reader let only 100-continue through. It is honoured for an
		// HTTP/1.1 client that has a body to send, and dropped otherwise
		// (RFC 9110 section 10.1.1).
		if req.ProtoAtLeast(1, 1) && f.Framing.Kind != BodyNone {
			f.Expect = true
		} else {
			delete(h, "Expect")
		}
	}
	RemoveHopByHop(h)
	return nil
}

// Started reports whether bytes of the body were taken from the client:
// the request cannot be sent again.
func (f *Forward) Started() bool { return f.started }

// GotByte reports whether the last attempt received bytes of a response.
func (f *Forward) GotByte() bool { return f.gotByte }

// Skipped reports whether the origin answered before asking for the body
// (Expect: 100-continue): the client connection cannot carry another
// request.
func (f *Forward) Skipped() bool { return f.skipped }

// Up returns the body bytes taken from the client so far.
func (f *Forward) Up() int64 { return f.up.Load() }

// Interrupt ends a wait for a response header (its client left). It may
// be called from another goroutine.
func (f *Forward) Interrupt() {
	if oc := f.waiting.Load(); oc != nil {
		oc.Conn.SetReadDeadline(aLongTimeAgo)
	}
}

// aLongTimeAgo is a deadline in the past: it interrupts blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// Send writes the request on oc with head and reads the response header,
// passing 1xx answers to the client (100 Continue only when it asked). A
// small body that has fully arrived goes with the header; a larger one is
// copied by its own goroutine while the response is read, so both can
// stream at once. With Expect: 100-continue the body waits for the
// origin's 100, or for ExpectContinueTimeout without an answer. ctx ending
// (the client left) gives up the wait: a *ClientError with ErrClientLeft.
// A failure to write the request is a *WriteError.
func (f *Forward) Send(ctx context.Context, oc *Conn, head *RequestHead) (*http.Response, error) {
	f.gotByte, f.skipped = false, false
	start := oc.N()
	head.Framing = f.Framing
	head.TE = f.TE
	head.Upgrade = f.Upgrade
	WriteRequestHead(oc.W, f.Req, head, f.lenBuf[:0])
	wait := false
	br := f.Client.R
	switch {
	case f.Framing.Kind == BodyNone:
	case f.Expect:
		wait = !f.continued
	case f.Framing.Kind == BodyLength && f.Framing.Length <= int64(br.Buffered()):
		p, _ := br.Peek(int(f.Framing.Length))
		oc.W.Write(p)
		f.inline = true
	}
	if err := oc.W.Flush(); err != nil {
		return nil, &WriteError{err}
	}
	if f.Framing.Kind != BodyNone && !f.inline && !wait {
		f.startCopier(oc)
	}
	maxHeader := f.MaxResponseHeaderBytes
	if maxHeader <= 0 {
		maxHeader = DefaultMaxResponseHeaderBytes
	}
	for n1xx := 0; ; {
		if wait {
			oc.Conn.SetReadDeadline(time.Now().Add(ExpectContinueTimeout))
			_, err := oc.R.Peek(1)
			oc.Conn.SetReadDeadline(time.Time{})
			if err != nil && oc.N() == start && errors.Is(err, os.ErrDeadlineExceeded) {
				// No answer: the origin does not do 100-continue. Let the
				// client send its body.
				wait = false
				if err := f.continueClient(); err != nil {
					return nil, err
				}
				f.startCopier(oc)
				continue
			}
			if err != nil {
				f.gotByte = oc.N() > start
				return nil, err
			}
		}
		// Interrupt (ctx's end comes first) cuts the read below short.
		f.waiting.Store(oc)
		if f.HeaderTimeout > 0 {
			oc.Conn.SetReadDeadline(time.Now().Add(f.HeaderTimeout))
		}
		if ctx.Err() != nil {
			f.waiting.Store(nil)
			return nil, &ClientError{ErrClientLeft}
		}
		resp, hit, err := oc.ReadResponse(f.Req, maxHeader)
		f.waiting.Store(nil)
		f.gotByte = oc.N() > start
		if f.HeaderTimeout > 0 {
			oc.Conn.SetReadDeadline(time.Time{})
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil, &ClientError{ErrClientLeft}
			case hit:
				return nil, &proxystatus.Error{Type: proxystatus.HTTPResponseHeaderSize, Detail: "response header section larger than " + strconv.Itoa(maxHeader) + " bytes"}
			case f.HeaderTimeout > 0 && errors.Is(err, os.ErrDeadlineExceeded):
				return nil, &proxystatus.Error{Type: proxystatus.ConnectionReadTimeout, Detail: "no response header within " + f.HeaderTimeout.String(), Err: err}
			}
			return nil, err
		}
		code := resp.StatusCode
		if code < 100 || code >= 200 || code == http.StatusSwitchingProtocols {
			f.skipped = wait
			return resp, nil
		}
		if n1xx++; n1xx > max1xxResponses {
			return nil, &proxystatus.Error{Type: proxystatus.HTTPProtocolError, Detail: "too many 1xx responses"}
		}
		if code == http.StatusContinue {
			if wait {
				wait = false
				if err := f.continueClient(); err != nil {
					return nil, err
				}
				f.startCopier(oc)
			}
			continue // an unasked-for 100 is dropped
		}
		if f.Req.ProtoAtLeast(1, 1) {
			WriteInterim(f.Client.W, resp)
			if err := f.Client.W.Flush(); err != nil {
				return nil, &ClientError{err}
			}
		}
	}
}

// continueClient tells the client to send its body.
func (f *Forward) continueClient() error {
	f.continued = true
	f.Client.W.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	if err := f.Client.W.Flush(); err != nil {
		return &ClientError{err}
	}
	return nil
}

// bodyCopier copies a request body from the client to the origin in its
// own goroutine. Its results may be read once done is closed.
type bodyCopier struct {
	done     chan struct{}
	oc       *Conn
	rerr     error // reading the client's body failed
	werr     error // writing to the origin failed
	complete bool  // the whole body was sent
	// stalled is set when the client sent nothing for BodyIdle (the
	// copy's own deadline, not EndBody's interruption).
	stalled bool
	aborted atomic.Bool
}

// cutOff reports whether the copy's read error is the interruption
// EndBody caused, not the client's own failure. A copy that failed on its
// own (a broken chunk, say) may be marked aborted too: it closes the
// origin connection, the response read fails, and EndBody can run before
// the copy's goroutine has finished.
func (bc *bodyCopier) cutOff() bool {
	return bc.aborted.Load() && !bc.stalled && errors.Is(bc.rerr, os.ErrDeadlineExceeded)
}

func (f *Forward) startCopier(oc *Conn) {
	f.started = true
	bc := &bodyCopier{done: make(chan struct{}), oc: oc}
	f.copier = bc
	go f.copyBody(bc)
}

// copyBody is the copier's goroutine. A client that fails to deliver its
// body (it left, stalled, or broke the chunked coding) ends the origin
// connection too, so the origin does not wait for the rest.
func (f *Forward) copyBody(bc *bodyCopier) {
	defer close(bc.done)
	br, ow := f.Client.R, bc.oc.W
	bufp := getCopyBuf()
	defer putCopyBuf(bufp)
	buf := *bufp
	var cw io.WriteCloser
	remain := f.Framing.Length
	// A client that stalls in its body is cut off after BodyIdle: each read
	// that waits on the socket has its own deadline (set before the abort
	// flag is checked, so EndBody's interruption is not lost).
	stalls := false
	defer func() {
		if stalls && bc.rerr == nil {
			f.Client.Conn.SetReadDeadline(time.Time{})
		}
	}()
	for {
		if f.BodyIdle > 0 && br.Buffered() == 0 {
			f.Client.Conn.SetReadDeadline(time.Now().Add(f.BodyIdle))
			stalls = true
			if bc.aborted.Load() {
				bc.rerr = os.ErrDeadlineExceeded
				return
			}
		}
		var n int
		var err error
		if f.Framing.Kind == BodyChunked {
			n, err = f.Req.Body.Read(buf)
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
			f.up.Add(int64(n))
			var werr error
			if f.Framing.Kind == BodyChunked {
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
			bc.stalled = errors.Is(err, os.ErrDeadlineExceeded) && !bc.aborted.Load()
			bc.oc.Conn.Close()
			return
		}
		if br.Buffered() == 0 {
			if err := ow.Flush(); err != nil {
				bc.werr = err
				return
			}
		}
	}
	if f.Framing.Kind == BodyChunked {
		ow.WriteString("0\r\n")
		writeTrailers(ow, f.Req.Trailer)
	}
	if err := ow.Flush(); err != nil {
		bc.werr = err
		return
	}
	bc.complete = true
}

// EndBody waits for the body copy. A forward that is over before the body
// was sent (the origin answered without reading it all, or failed) cuts
// the copy off: the client's reads are interrupted and the origin
// connection is closed.
func (f *Forward) EndBody() {
	bc := f.copier
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
	f.Client.Conn.SetReadDeadline(aLongTimeAgo)
	bc.oc.Conn.Close()
	<-bc.done
	if bc.complete {
		f.Client.Conn.SetReadDeadline(time.Time{}) // it finished after all
	}
}

// BodyDone reports whether the client's request body has been read
// completely (or there was none), so the client connection may carry
// another request. Call it after EndBody.
func (f *Forward) BodyDone() bool {
	switch {
	case f.Framing.Kind == BodyNone, f.inline:
		return true
	case f.copier != nil:
		return f.copier.complete
	}
	return false
}

// ConsumeInline takes an inline body out of the client's reader once the
// answer is settled.
func (f *Forward) ConsumeInline() {
	if f.inline {
		f.Client.R.Discard(int(f.Framing.Length))
		f.up.Store(f.Framing.Length)
	}
}

// BodyError returns how the client failed to deliver its body (after
// EndBody): nil when it did not, or when egret cut the copy off itself.
// A stall past BodyIdle is os.ErrDeadlineExceeded.
func (f *Forward) BodyError() error {
	if bc := f.copier; bc != nil && bc.rerr != nil && !bc.cutOff() {
		return bc.rerr
	}
	return nil
}

// CopyResponse streams resp's body to the client's writer w, re-framed
// (chunked, or as it came), flushing whenever the origin has nothing more
// at hand (src is the origin's reader). A client that stops reading is cut
// off after idle: writes that reach the socket run under a deadline on
// client, moved on at most once a second; deadline reports that one was
// set (the caller clears it after its last write). down counts the bytes.
// It returns the origin's (read) and the client's (write) failure; the
// caller flushes the end.
func CopyResponse(w *bufio.Writer, client net.Conn, resp *http.Response, src *bufio.Reader, chunked bool, idle time.Duration, down *int64) (rerr, werr error, deadline bool) {
	var cw io.WriteCloser
	var dst io.Writer = w
	if chunked {
		cw = httputil.NewChunkedWriter(w)
		dst = cw
	}
	var bufp *[]byte
	defer func() {
		if bufp != nil {
			putCopyBuf(bufp)
		}
	}()
	var deadlineAt time.Time
	progress := func() {
		if idle > 0 {
			if now := time.Now(); now.Sub(deadlineAt) > time.Second {
				deadlineAt = now
				client.SetWriteDeadline(now.Add(idle))
				deadline = true
			}
		}
	}
	for {
		var p []byte
		if !chunked && bufp == nil && w.Available() >= 1024 {
			// A small body goes into the header's write.
			p = w.AvailableBuffer()
			p = p[:cap(p)]
		} else {
			if bufp == nil {
				bufp = getCopyBuf()
			}
			p = *bufp
		}
		n, err := resp.Body.Read(p)
		if n > 0 {
			*down += int64(n)
			if n > w.Available() {
				progress() // this write reaches the socket
			}
			if _, e := dst.Write(p[:n]); e != nil {
				return nil, e, deadline
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err, nil, deadline
		}
		if src.Buffered() == 0 && w.Buffered() > 0 {
			progress()
			if e := w.Flush(); e != nil {
				return nil, e, deadline
			}
		}
	}
	if chunked {
		w.WriteString("0\r\n")
		writeTrailers(w, resp.Trailer)
	}
	return nil, nil, deadline
}

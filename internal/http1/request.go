package http1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"golang.org/x/net/http/httpguts"

	"egret.io/egret/internal/proxystatus"
)

// DefaultMaxHeaderBytes bounds a request header when Reader.MaxHeaderBytes
// is zero.
const DefaultMaxHeaderBytes = 64 << 10

// Reader reads the requests of one client connection: net/http's parser
// (http.ReadRequest: request line, header validation, Content-Length and
// Transfer-Encoding rules, chunked bodies) with the checks net/http's
// server adds, and one it leaves out (Transfer-Encoding beside
// Content-Length is refused). Its buffered reader holds what the client
// sent ahead: a request body, a pipelined request, a tunnel's first bytes.
type Reader struct {
	// MaxHeaderBytes bounds a request header; zero means
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int

	lr countingReader
	br *bufio.Reader
}

// Reset makes r read from c, with a pooled buffer; Release gives it back.
func (r *Reader) Reset(c net.Conn) {
	r.lr = countingReader{c: c, rec: r.lr.rec[:0]}
	r.br = GetReader(&r.lr)
}

// Release returns the buffer. The Reader may be Reset again.
func (r *Reader) Release() {
	if r.br != nil {
		PutReader(r.br)
		r.br = nil
	}
	if cap(r.lr.rec) > 4*BufSize {
		r.lr.rec = nil // a large header once does not stay with the connection
	}
}

// Buf is the connection's buffered reader: bodies and tunnels read on from
// where the request header ended.
func (r *Reader) Buf() *bufio.Reader { return r.br }

// Start arms the header limit for the next request and waits for its first
// byte, skipping the empty lines a request may follow (RFC 9112 section
// 2.2). It returns the connection's read error, or a *proxystatus.Error
// (431) when empty lines alone pass the limit. Read must follow a nil
// error; after an error the limit is off again.
func (r *Reader) Start() error {
	lr := &r.lr
	lr.limit(int64(r.maxHeader()) + HeaderSlack)
	lr.rec = lr.rec[:0]
	if n := r.br.Buffered(); n > 0 {
		p, _ := r.br.Peek(n) // pipelined: the request is already here
		lr.rec = append(lr.rec, p...)
	}
	lr.recording = true
	for {
		p, err := r.br.Peek(1)
		if err != nil {
			lr.recording = false
			lr.unlimit()
			if lr.hit {
				return headerTooLarge()
			}
			return err
		}
		if p[0] != '\r' && p[0] != '\n' {
			return nil
		}
		r.br.Discard(1)
	}
}

func (r *Reader) maxHeader() int {
	if r.MaxHeaderBytes > 0 {
		return r.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}

// HeaderBuffered reports whether a whole request header is buffered
// already (then reading it cannot stall).
func (r *Reader) HeaderBuffered() bool {
	p, _ := r.br.Peek(r.br.Buffered())
	return bytes.Contains(p, []byte("\r\n\r\n")) || bytes.Contains(p, []byte("\n\n"))
}

// Pipelined reports whether bytes of the next request are buffered.
func (r *Reader) Pipelined() bool { return r.br.Buffered() > 0 }

// Read reads the request header Start found the beginning of. Errors the
// client must be told about are *proxystatus.Error values (the request,
// when it parsed, comes with them); any other error means the connection
// ended or timed out (IsNetReadError).
func (r *Reader) Read() (*http.Request, error) {
	lr := &r.lr
	defer func() { lr.recording = false; lr.unlimit() }()
	req, err := http.ReadRequest(r.br)
	if err != nil {
		if lr.hit {
			return nil, headerTooLarge()
		}
		if IsNetReadError(err) {
			return nil, err
		}
		st := http.StatusBadRequest
		if strings.Contains(err.Error(), "transfer encoding") {
			st = http.StatusNotImplemented // RFC 9112 section 6.1
		}
		return nil, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Status: st, Detail: "malformed request: " + proxystatus.Text(err)}
	}
	// What net/http's server checks beyond ReadRequest.
	if req.ProtoMajor != 1 {
		return req, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Status: http.StatusHTTPVersionNotSupported,
			Detail: "unsupported protocol version " + req.Proto + ": egret speaks HTTP/1.x to clients"}
	}
	// http.ReadRequest took the Host field out of the header; its raw
	// copy says whether there was one (ReadRequest refused two).
	raw := scanHeader(lr.rec)
	if req.ProtoAtLeast(1, 1) && !raw.host && req.Method != http.MethodConnect {
		return req, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "missing required Host header"}
	}
	if raw.host && !validHost(raw, req.Host) {
		return req, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "malformed Host header"}
	}
	// Transfer-Encoding beside Content-Length is how requests are smuggled
	// past a front proxy that reads the other one (RFC 9112 section 6.3):
	// refuse it rather than pick one.
	if len(req.TransferEncoding) > 0 && raw.contentLength {
		return req, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "request has both Transfer-Encoding and Content-Length"}
	}
	if e, ok := req.Header["Expect"]; ok && !(len(e) == 1 && strings.EqualFold(strings.TrimSpace(e[0]), "100-continue")) {
		return req, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Status: http.StatusExpectationFailed, Detail: "unsupported expectation"}
	}
	return req, nil
}

func headerTooLarge() *proxystatus.Error {
	return &proxystatus.Error{Type: proxystatus.HTTPRequestHeaderSize, Detail: "request header section too large"}
}

// rawHeader is what scanHeader found in a raw request header.
type rawHeader struct {
	host          bool   // a Host field
	hostValue     []byte // its value, trimmed
	hostFolded    bool   // its value went on over another line (obs-fold)
	contentLength bool   // a Content-Length field
}

// scanHeader looks through the raw request header at the start of rec
// (after any empty lines) for the fields http.ReadRequest leaves no trace
// of. ReadRequest has validated the header: field names end at the colon,
// with no whitespace.
func scanHeader(rec []byte) rawHeader {
	var h rawHeader
	first, inHost := true, false
	for len(rec) > 0 {
		line := rec
		if i := bytes.IndexByte(rec, '\n'); i >= 0 {
			line, rec = rec[:i], rec[i+1:]
		} else {
			rec = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			if first {
				continue // empty lines before the request line
			}
			break // the end of the header section
		}
		if first {
			first = false // the request line
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			h.hostFolded = h.hostFolded || inHost
			continue
		}
		inHost = false
		switch {
		case hasFieldName(line, "host:"):
			h.host, inHost = true, true
			h.hostValue = bytes.TrimSpace(line[len("host:"):])
		case hasFieldName(line, "content-length:"):
			h.contentLength = true
		}
	}
	return h
}

func hasFieldName(line []byte, name string) bool {
	if len(line) < len(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := line[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

// validHost applies net/http's server check to the Host field. reqHost is
// the request's host, usually the same text (then no copy is made).
func validHost(h rawHeader, reqHost string) bool {
	if h.hostFolded {
		return false // the value joined over lines holds a space
	}
	if string(h.hostValue) == reqHost {
		return httpguts.ValidHostHeader(reqHost)
	}
	return httpguts.ValidHostHeader(string(h.hostValue))
}

// IsNetReadError reports whether err ends a message read because the
// connection ended or timed out, not because of what the peer sent (a
// header cut short is answered, like net/http does).
func IsNetReadError(err error) bool {
	if err == io.EOF || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}

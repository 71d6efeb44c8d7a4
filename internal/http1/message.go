package http1

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// BodyKind is how a message's body is delimited.
type BodyKind uint8

// Body kinds.
const (
	BodyNone    BodyKind = iota
	BodyLength           // Content-Length bytes
	BodyChunked          // chunked transfer coding
)

// Framing is how egret delimits the body of a message it sends.
type Framing struct {
	Kind   BodyKind
	Length int64 // the BodyLength body's size
	// Zero sends "Content-Length: 0" for a message without a body: one
	// whose sender said so, or whose method expects a body.
	Zero bool
}

// RequestFraming is the framing of the body egret forwards for req, as
// http.ReadRequest read it.
func RequestFraming(req *http.Request) Framing {
	switch {
	case len(req.TransferEncoding) > 0:
		return Framing{Kind: BodyChunked}
	case req.ContentLength > 0:
		return Framing{Kind: BodyLength, Length: req.ContentLength}
	}
	_, said := req.Header["Content-Length"]
	return Framing{Zero: said || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch}
}

// IsHopByHop reports whether a (canonical) field name is hop-by-hop
// (RFC 9110 section 7.6.1, and the fields proxies have used).
func IsHopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// IsFraming reports whether a (canonical) field name frames or routes a
// message. egret writes these itself on every hop, from the message it
// forwards — Host from the request target, Content-Length and
// Transfer-Encoding from the body it sends — so no header edit, such as a
// Connection token naming one of them, can change how the next hop reads
// the message (RFC 9112 section 6.3; request smuggling).
func IsFraming(k string) bool {
	return k == "Content-Length" || k == "Transfer-Encoding" || k == "Host"
}

// RemoveHopByHop deletes the hop-by-hop fields of h (the fixed ones and
// those the Connection field names) and the framing fields, which the
// writer of the next hop's message adds itself (see IsFraming).
func RemoveHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			tok = strings.TrimSpace(tok)
			switch {
			case tok == "", strings.EqualFold(tok, "close"), strings.EqualFold(tok, "keep-alive"), strings.EqualFold(tok, "upgrade"):
				// options, or fields deleted below anyway
			default:
				delete(h, http.CanonicalHeaderKey(tok))
			}
		}
	}
	for k := range h {
		if IsHopByHop(k) || IsFraming(k) {
			delete(h, k)
		}
	}
}

// Writer is what the head writers write to (a *bufio.Writer).
type Writer interface {
	io.Writer
	io.StringWriter
	io.ByteWriter
}

// RequestHead is the request line and the fields egret writes itself for
// the next hop.
type RequestHead struct {
	// Scheme and Host are the request target's; Absolute writes the
	// absolute form (to an upstream proxy), else the origin form.
	Scheme, Host string
	Absolute     bool
	Via          string // egret's Via element
	Framing      Framing
	TE           bool   // "Te: trailers"
	Upgrade      string // the protocol to switch to ("" none)
	Auth         string // Proxy-Authorization value ("" none)
}

// WriteRequestHead writes req's request line and header for the next hop:
// req.Header as it is (its hop-by-hop and framing fields removed by
// RemoveHopByHop), then the fields of h. lenBuf is scratch space (32
// bytes keep it from allocating).
func WriteRequestHead(w Writer, req *http.Request, h *RequestHead, lenBuf []byte) {
	w.WriteString(req.Method)
	w.WriteByte(' ')
	if h.Absolute {
		w.WriteString(h.Scheme)
		w.WriteString("://")
		w.WriteString(h.Host)
	}
	w.WriteString(req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(h.Host)
	w.WriteString("\r\n")
	req.Header.Write(w)
	w.WriteString("Via: ")
	w.WriteString(h.Via)
	w.WriteString("\r\n")
	// Framing is egret's own: from the body it sends.
	switch {
	case h.Framing.Kind == BodyChunked:
		w.WriteString("Transfer-Encoding: chunked\r\n")
		if len(req.Trailer) > 0 {
			writeTrailerNames(w, req.Trailer)
		}
	case h.Framing.Kind == BodyLength:
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(lenBuf[:0], h.Framing.Length, 10))
		w.WriteString("\r\n")
	case h.Framing.Zero:
		w.WriteString("Content-Length: 0\r\n")
	}
	if h.TE {
		w.WriteString("Te: trailers\r\n")
	}
	if h.Upgrade != "" {
		w.WriteString("Connection: Upgrade\r\nUpgrade: ")
		w.WriteString(h.Upgrade)
		w.WriteString("\r\n")
	}
	if h.Auth != "" {
		w.WriteString("Proxy-Authorization: ")
		w.WriteString(h.Auth)
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
}

// ResponseHead is what egret writes itself in a response to its client.
type ResponseHead struct {
	Via string // egret's Via element
	// Length is the Content-Length to send, -1 for none.
	Length  int64
	Chunked bool
	// Close says "Connection: close" to an HTTP/1.1 client; KeepAlive
	// says "Connection: keep-alive" to an HTTP/1.0 one.
	Close, KeepAlive bool
}

// WriteResponseHead writes resp's status line and header for the client:
// resp.Header without its hop-by-hop and framing fields (RemoveHopByHop
// edits it), then Via, a Date when the origin sent none (RFC 9110 section
// 6.6.1), and the fields of h. lenBuf is scratch space (32 bytes keep it
// from allocating).
func WriteResponseHead(w Writer, resp *http.Response, h *ResponseHead, lenBuf []byte) {
	w.WriteString("HTTP/1.1 ")
	w.WriteString(StatusText(resp))
	w.WriteString("\r\n")
	RemoveHopByHop(resp.Header)
	resp.Header.Write(w)
	w.WriteString("Via: ")
	w.WriteString(h.Via)
	w.WriteString("\r\n")
	if h.Length >= 0 {
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(lenBuf[:0], h.Length, 10))
		w.WriteString("\r\n")
	}
	if _, ok := resp.Header["Date"]; !ok {
		w.WriteString("Date: ")
		w.Write(AppendDate(lenBuf[:0]))
		w.WriteString("\r\n")
	}
	if h.Chunked {
		w.WriteString("Transfer-Encoding: chunked\r\n")
		if len(resp.Trailer) > 0 {
			writeTrailerNames(w, resp.Trailer)
		}
	}
	switch {
	case h.Close:
		w.WriteString("Connection: close\r\n")
	case h.KeepAlive:
		w.WriteString("Connection: keep-alive\r\n")
	}
	w.WriteString("\r\n")
}

// WriteInterim writes a 1xx response (it has no body) for the client.
func WriteInterim(w Writer, resp *http.Response) {
	w.WriteString("HTTP/1.1 ")
	w.WriteString(StatusText(resp))
	w.WriteString("\r\n")
	RemoveHopByHop(resp.Header)
	resp.Header.Write(w)
	w.WriteString("\r\n")
}

// WriteSwitch writes the 101 response that switches the connection to
// protocol: the origin's header without its hop-by-hop and framing fields
// (a 101 has no body), then the switch itself and egret's Via.
func WriteSwitch(w Writer, resp *http.Response, protocol, via string) {
	w.WriteString("HTTP/1.1 ")
	w.WriteString(StatusText(resp))
	w.WriteString("\r\n")
	RemoveHopByHop(resp.Header)
	resp.Header.Write(w)
	w.WriteString("Connection: Upgrade\r\nUpgrade: ")
	w.WriteString(protocol)
	w.WriteString("\r\nVia: ")
	w.WriteString(via)
	w.WriteString("\r\n\r\n")
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
		if IsHopByHop(k) || IsFraming(k) {
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

// HeaderLength is the value of h's Content-Length field (which
// http.ReadResponse validated), or -1.
func HeaderLength(h http.Header) int64 {
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

// StatusText is the status code and reason phrase to pass on for resp:
// the origin's own, unless it holds characters that have no place there.
func StatusText(resp *http.Response) string {
	st := resp.Status
	if len(st) > 4 && st[3] == ' ' && httpguts.ValidHeaderFieldValue(st) {
		return st
	}
	return strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
}

// Printable reports whether s is printable ASCII (an Upgrade protocol).
func Printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Idempotent reports whether req may be sent twice (RFC 9110 section
// 9.2.2), also when it carries an Idempotency-Key.
func Idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// ViaHas reports whether a Via field value lists received-by name. Each
// element is "protocol received-by [comment]".
func ViaHas(v, name string) bool {
	for v != "" {
		var el string
		el, v, _ = strings.Cut(v, ",")
		el = strings.TrimSpace(el)
		_, rest, ok := strings.Cut(el, " ")
		if !ok {
			continue
		}
		by, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if strings.EqualFold(by, name) {
			return true
		}
	}
	return false
}

// dateCache caches the Date value of the current second.
type dateCache struct {
	sec int64
	val []byte
}

var lastDate atomic.Pointer[dateCache]

// AppendDate appends the current time as an HTTP date.
func AppendDate(b []byte) []byte {
	now := time.Now()
	if d := lastDate.Load(); d != nil && d.sec == now.Unix() {
		return append(b, d.val...)
	}
	d := &dateCache{sec: now.Unix(), val: now.UTC().AppendFormat(nil, http.TimeFormat)}
	lastDate.Store(d)
	return append(b, d.val...)
}

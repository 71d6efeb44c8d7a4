package proxystatus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Name is the proxy name egret uses in Proxy-Status and Via.
const Name = "egret"

// Type is an RFC 9209 proxy error type (section 2.3), or one of egret's own
// where RFC 9209 has none. The set is closed: it is used as a metric label.
type Type string

// Proxy error types egret produces.
const (
	DNSTimeout             Type = "dns_timeout"
	DNSError               Type = "dns_error"
	DestinationNotFound    Type = "destination_not_found"
	DestinationUnavailable Type = "destination_unavailable"
	DestinationIPProhibit  Type = "destination_ip_prohibited"
	DestinationIPUnroute   Type = "destination_ip_unroutable"
	ConnectionRefused      Type = "connection_refused"
	ConnectionTerminated   Type = "connection_terminated"
	ConnectionTimeout      Type = "connection_timeout"
	ConnectionReadTimeout  Type = "connection_read_timeout"
	ConnectionWriteTimeout Type = "connection_write_timeout"
	ConnectionLimitReached Type = "connection_limit_reached"
	HTTPRequestError       Type = "http_request_error"
	HTTPRequestDenied      Type = "http_request_denied"
	HTTPResponseIncomplete Type = "http_response_incomplete"
	HTTPResponseHeaderSize Type = "http_response_header_section_size"
	HTTPProtocolError      Type = "http_protocol_error"
	TLSProtocolError       Type = "tls_protocol_error"
	TLSCertificateError    Type = "tls_certificate_error"
	ProxyInternalError     Type = "proxy_internal_error"
	ProxyConfigurationErr  Type = "proxy_configuration_error"
	ProxyLoopDetected      Type = "proxy_loop_detected"
	// HTTPRequestHeaderSize is egret's type for a client request whose header
	// section is too large (RFC 9209 has only the response variant).
	HTTPRequestHeaderSize Type = "http_request_header_section_size"
	// UpstreamAuthRequired marks an upstream proxy that answered 407: the
	// credentials egret holds for it are wrong. Reported as a 502 with the
	// upstream named, never passed on as a 407 that would blame the client.
	UpstreamAuthRequired Type = "upstream_auth_required"
	// UpstreamRefused marks an upstream proxy that answered CONNECT with an
	// error status other than 407 (403 policy, 5xx).
	UpstreamRefused Type = "upstream_refused"
	// PoolUnavailable marks a pool with no member left to try.
	PoolUnavailable Type = "pool_unavailable"
)

// Error is a failure egret reports to its client.
type Error struct {
	Type     Type
	Status   int    // HTTP status; 0 means the default for Type
	Upstream string // redacted URL of the upstream proxy involved, if any
	Detail   string // one line for the body and the Proxy-Status details parameter
	Err      error  // the cause, for logs; never shown to the client
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Type))
	if e.Upstream != "" {
		b.WriteString(" via ")
		b.WriteString(e.Upstream)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil && e.Detail == "" {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Code returns the HTTP status for e.
func (e *Error) Code() int {
	if e.Status != 0 {
		return e.Status
	}
	return DefaultStatus(e.Type)
}

// New returns an *Error of type t with a detail line.
func New(t Type, detail string, cause error) *Error {
	return &Error{Type: t, Detail: detail, Err: cause}
}

// DefaultStatus maps an error type to the status egret answers with:
// policy 403, timeouts 504, an unusable request 400, the rest 502.
func DefaultStatus(t Type) int {
	switch t {
	case HTTPRequestDenied, DestinationIPProhibit:
		return http.StatusForbidden
	case DNSTimeout, ConnectionTimeout, ConnectionReadTimeout, ConnectionWriteTimeout:
		return http.StatusGatewayTimeout
	case HTTPRequestError:
		return http.StatusBadRequest
	case HTTPRequestHeaderSize:
		return http.StatusRequestHeaderFieldsTooLarge
	case ConnectionLimitReached, PoolUnavailable:
		return http.StatusServiceUnavailable
	case ProxyLoopDetected:
		return http.StatusLoopDetected
	default:
		return http.StatusBadGateway
	}
}

// From classifies err. An *Error anywhere in the chain wins; otherwise
// network errors are mapped by what the operating system said.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Type: classify(err), Err: err, Detail: oneLine(Text(err))}
}

// Text is err's message fit for a log line, a Proxy-Status header and a
// response body: a parse error that quotes the peer's line (net/http's
// "malformed HTTP request \"...\"", net/textproto's "malformed MIME header
// line: \"...\"") is cut before the quote, because that line may be a
// Proxy-Authorization or Cookie field.
func Text(err error) string {
	s := err.Error()
	var pe textproto.ProtocolError
	if errors.As(err, &pe) || strings.HasPrefix(s, "malformed HTTP") {
		if i := strings.IndexByte(s, '"'); i > 0 {
			return strings.TrimRight(s[:i], ": ") + " (the line is not repeated: it may hold credentials)"
		}
	}
	return s
}

func classify(err error) Type {
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		switch {
		case dnsErr.IsTimeout:
			return DNSTimeout
		case dnsErr.IsNotFound:
			return DestinationNotFound
		default:
			return DNSError
		}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return ConnectionTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ConnectionRefused
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return DestinationIPUnroute
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		return ConnectionTerminated
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ConnectionTimeout
	}
	return ProxyInternalError
}

// Header returns the Proxy-Status field value for e (RFC 9209 section 2):
// egret; error=TYPE; details="..."; and, when an upstream is involved,
// next-hop naming it.
func (e *Error) Header() string {
	var b strings.Builder
	b.WriteString(Name)
	b.WriteString("; error=")
	b.WriteString(string(e.Type))
	if e.Upstream != "" {
		b.WriteString("; next-hop=")
		b.WriteString(strconv.Quote(sfString(e.Upstream)))
	}
	if d := e.Detail; d != "" {
		b.WriteString("; details=")
		b.WriteString(strconv.Quote(sfString(d)))
	}
	return b.String()
}

// Body returns the one-line plain-text body for e.
func (e *Error) Body() string {
	var b strings.Builder
	b.WriteString("egret: ")
	b.WriteString(http.StatusText(e.Code()))
	b.WriteString(": ")
	b.WriteString(string(e.Type))
	if e.Upstream != "" {
		b.WriteString(" (upstream ")
		b.WriteString(e.Upstream)
		b.WriteString(")")
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(oneLine(e.Detail))
	}
	b.WriteString("\n")
	return b.String()
}

// Write sends e as a complete HTTP response on w.
func Write(w http.ResponseWriter, e *Error) {
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	body := e.Body()
	h.Set("Proxy-Status", e.Header())
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(e.Code())
	io.WriteString(w, body)
}

// WriteRaw writes e as an HTTP/1.1 response directly on a connection, for
// listeners that do not have an http.ResponseWriter (hijacked CONNECT).
// closeConn adds "Connection: close".
func WriteRaw(w io.Writer, e *Error, closeConn bool) error {
	body := e.Body()
	code := e.Code()
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", code, http.StatusText(code))
	b.WriteString("Proxy-Status: ")
	b.WriteString(e.Header())
	b.WriteString("\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ")
	b.WriteString(strconv.Itoa(len(body)))
	b.WriteString("\r\nCache-Control: no-store\r\n")
	if closeConn {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	_, err := io.WriteString(w, b.String())
	return err
}

// sfString keeps a value within what a Structured Fields string may hold
// (printable ASCII) so the header is always well formed.
func sfString(s string) string {
	s = oneLine(s)
	ok := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	b := []byte(s)
	for i := range b {
		if b[i] < 0x20 || b[i] > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

func oneLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	const max = 300
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// Scrub removes from s what a client's destination text may carry that is
// nobody's business in a log line or an answer: in each double-quoted part
// (how Go quotes values in errors), user information up to the last '@'
// and everything from a '?' or '#' on (a query may hold tokens).
func Scrub(s string) string {
	if !strings.ContainsAny(s, "@?#") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i+1:], '"')
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		q := s[i+1 : i+1+j]
		if k := strings.LastIndexByte(q, '@'); k >= 0 {
			q = "…@" + q[k+1:]
		}
		if k := strings.IndexAny(q, "?#"); k >= 0 {
			q = q[:k] + "…"
		}
		b.WriteString(s[:i+1])
		b.WriteString(q)
		b.WriteByte('"')
		s = s[i+2+j:]
	}
}

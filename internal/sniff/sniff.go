package sniff

import (
	"errors"
	"net"
	"strconv"
	"time"
)

// Defaults for Options.
const (
	DefaultMaxBytes         = 16 << 10
	DefaultFirstByteTimeout = 300 * time.Millisecond
	DefaultTimeout          = 3 * time.Second
)

// Parser outcomes other than a name.
var (
	// ErrIncomplete means the bytes so far are a valid beginning; more are
	// needed.
	ErrIncomplete = errors.New("sniff: incomplete")
	// ErrNotTLS and ErrNotHTTP mean the bytes are not that protocol.
	ErrNotTLS  = errors.New("sniff: not a TLS ClientHello")
	ErrNotHTTP = errors.New("sniff: not an HTTP/1 request")
	// ErrNoName means a complete message that carries no usable name (a
	// ClientHello without SNI, an HTTP/1.0 request without Host).
	ErrNoName = errors.New("sniff: no server name")
)

// Proto is the protocol Sniff recognised.
type Proto int

// Protocols.
const (
	Unknown Proto = iota // nothing read, or not TLS or HTTP/1
	TLS
	HTTP
)

func (p Proto) String() string {
	switch p {
	case Unknown:
		return "unknown"
	case TLS:
		return "tls"
	case HTTP:
		return "http"
	default:
		return "unknown(" + strconv.Itoa(int(p)) + ")"
	}
}

// Cut says why Sniff stopped before it knew the protocol and the name (or
// that there is none). A check that needs the name (the SNI check under
// enforce) treats every cut as a failure to check, never as "no name".
type Cut uint8

// Cuts.
const (
	CutNone      Cut = iota // the protocol and the name, or its absence, are known
	CutTimeout              // time ran out first (nothing sent, or part of a message)
	CutMaxBytes             // MaxBytes were read and the message is longer
	CutMalformed            // a TLS ClientHello or HTTP/1 request that does not parse
	CutClosed               // the client closed or failed before the message was complete
)

// String names the cut for a log line: "timeout", "max_bytes",
// "malformed", "closed"; "" for CutNone.
func (c Cut) String() string {
	switch c {
	case CutNone:
		return ""
	case CutTimeout:
		return "timeout"
	case CutMaxBytes:
		return "max_bytes"
	case CutMalformed:
		return "malformed"
	case CutClosed:
		return "closed"
	}
	return "unknown(" + strconv.Itoa(int(c)) + ")"
}

// Result is what Sniff learned.
type Result struct {
	Proto Proto
	// Host is the lower-cased SNI name (TLS) or Host name without port
	// (HTTP); empty when none was found. For HTTP it may be an IP literal
	// (without brackets).
	Host string
	// Port is the port written in the HTTP Host (or absolute URI); 0 when
	// none was written. Always 0 for TLS.
	Port uint16
	// Peeked holds every byte read from the connection, to be replayed
	// before anything else is relayed. It may be non-empty even when Sniff
	// returns an error.
	Peeked []byte
	// Cut is why sniffing stopped short; CutNone when it finished.
	Cut Cut
}

// Options bound Sniff. The zero value uses the defaults.
type Options struct {
	MaxBytes         int           // stop after this many bytes; 0 = DefaultMaxBytes
	FirstByteTimeout time.Duration // wait this long for the client to speak; 0 = DefaultFirstByteTimeout
	Timeout          time.Duration // wait this long in all; 0 = DefaultTimeout
}

// Sniff reads from c until it knows the protocol and name, the data is not
// TLS or HTTP/1, MaxBytes are read, or a timeout passes. Running out of
// bytes or time is not an error: the Result says what is known, and its
// Cut why it is not more. The error is non-nil only when reading c failed
// for another reason (the client closed, a reset; Cut is CutClosed);
// Result.Peeked is valid even then. Sniff uses c's read
// deadline and clears it before returning.
func Sniff(c net.Conn, o Options) (Result, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.FirstByteTimeout <= 0 {
		o.FirstByteTimeout = DefaultFirstByteTimeout
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	start := time.Now()
	defer c.SetReadDeadline(time.Time{})
	c.SetReadDeadline(start.Add(min(o.FirstByteTimeout, o.Timeout)))

	var res Result
	buf := make([]byte, 0, min(2048, o.MaxBytes))
	for len(buf) < o.MaxBytes {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf), o.MaxBytes))
			copy(grown, buf)
			buf = grown
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		if n > 0 && len(buf) == 0 {
			c.SetReadDeadline(start.Add(o.Timeout))
		}
		buf = buf[:len(buf)+n]
		res.Peeked = buf
		if n > 0 {
			if done := res.parse(buf); done {
				return res, nil
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				res.Cut = CutTimeout
				return res, nil
			}
			res.Cut = CutClosed
			return res, err
		}
	}
	res.Cut = CutMaxBytes
	return res, nil
}

// parse updates r from the bytes so far and reports whether sniffing is
// over.
func (r *Result) parse(b []byte) bool {
	r.Proto = Classify(b)
	switch r.Proto {
	case TLS:
		name, err := ParseClientHello(b)
		switch err {
		case ErrIncomplete:
			return false
		case ErrNotTLS:
			r.Proto = Unknown
		case nil, ErrNoName:
		default:
			r.Cut = CutMalformed
		}
		r.Host = name
		return true
	case HTTP:
		host, port, err := ParseHTTP(b)
		switch err {
		case ErrIncomplete:
			return false
		case ErrNotHTTP:
			r.Proto = Unknown
		case nil, ErrNoName:
		default:
			r.Cut = CutMalformed
		}
		r.Host, r.Port = host, port
		return true
	}
	return true
}

// Classify guesses the protocol from the first bytes: a TLS handshake
// record, an HTTP/1 request line beginning with an upper-case method, or
// Unknown.
func Classify(b []byte) Proto {
	if len(b) == 0 {
		return Unknown
	}
	if b[0] == recordTypeHandshake && (len(b) < 2 || b[1] == 3) {
		return TLS
	}
	for i, ch := range b {
		switch {
		case ch == ' ' && i > 0:
			return HTTP
		case (ch >= 'A' && ch <= 'Z' || ch == '-' || ch == '_') && i < maxMethodLen:
		default:
			return Unknown
		}
	}
	return HTTP // an upper-case prefix, maybe a method
}

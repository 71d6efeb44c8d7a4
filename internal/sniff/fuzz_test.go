package sniff

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// bytesConn is a net.Conn that reads from a fixed buffer and discards
// writes: enough for crypto/tls to parse a ClientHello.
type bytesConn struct {
	net.Conn // nil: other methods are never called
	r        *bytes.Reader
}

func (c bytesConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c bytesConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c bytesConn) Close() error                     { return nil }
func (c bytesConn) SetDeadline(time.Time) error      { return nil }
func (c bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (c bytesConn) SetWriteDeadline(time.Time) error { return nil }
func (c bytesConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c bytesConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

// goServerName feeds b to a crypto/tls server and returns the SNI it saw,
// or ok=false when it did not get as far as a parsed ClientHello.
func goServerName(b []byte) (name string, ok bool) {
	tls.Server(bytesConn{r: bytes.NewReader(b)}, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, ok = h.ServerName, true
		return nil, errors.New("stop")
	}}).Handshake()
	return name, ok
}

func FuzzParseClientHello(f *testing.F) {
	for _, tc := range helloCases(f) {
		if len(tc.in) <= 1024 { // the default fuzz minimisation crawls on big inputs
			f.Add(tc.in)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := ParseClientHello(b)
		if err != nil {
			if name != "" {
				t.Fatalf("name %q with error %v", name, err)
			}
			return
		}
		if name != strings.ToLower(name) || !validHostname(name) {
			t.Fatalf("invalid name %q", name)
		}
		for _, n := range []int{0, 1, 5, len(b) / 2, len(b) - 1} {
			if n < 0 || n >= len(b) {
				continue
			}
			if got, err := ParseClientHello(b[:n]); err != ErrIncomplete && (err != nil || got != name) {
				t.Fatalf("prefix %d: %q %v, full: %q", n, got, err, name)
			}
		}
		// The reference: crypto/tls's own parser, where it accepts the hello.
		if goName, ok := goServerName(b); ok && goName != "" && !strings.EqualFold(goName, name) {
			t.Fatalf("crypto/tls saw SNI %q, we saw %q", goName, name)
		}
	})
}

func FuzzParseHTTP(f *testing.F) {
	for _, tc := range httpCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		host, port, err := ParseHTTP(b)
		if err != nil {
			if host != "" || port != 0 {
				t.Fatalf("host %q port %d with error %v", host, port, err)
			}
			return
		}
		if host == "" || host != strings.ToLower(host) {
			t.Fatalf("bad host %q", host)
		}
		// The reference: net/http's request parser, where it accepts the
		// request, must see the same host.
		req, rerr := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
		if rerr != nil || req.Host == "" {
			return
		}
		goHost := strings.TrimSuffix(strings.ToLower((&url.URL{Host: req.Host}).Hostname()), ".")
		if ip, err := netip.ParseAddr(goHost); err == nil {
			goHost = ip.String()
		}
		if goHost != host {
			t.Fatalf("net/http saw host %q (%q), we saw %q", goHost, req.Host, host)
		}
	})
}

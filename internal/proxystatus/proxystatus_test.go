package proxystatus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"net/textproto"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestFrom(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Type
		code int
	}{
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, ConnectionRefused, 502},
		{&net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, DestinationNotFound, 502},
		{&net.DNSError{Err: "timeout", Name: "x", IsTimeout: true}, DNSTimeout, 504},
		{&net.DNSError{Err: "server misbehaving", Name: "x"}, DNSError, 502},
		{context.DeadlineExceeded, ConnectionTimeout, 504},
		{fmt.Errorf("dial: %w", syscall.EHOSTUNREACH), DestinationIPUnroute, 502},
		{syscall.ECONNRESET, ConnectionTerminated, 502},
		{errors.New("something odd"), ProxyInternalError, 502},
		{fmt.Errorf("wrapped: %w", &Error{Type: HTTPRequestDenied}), HTTPRequestDenied, 403},
		{&Error{Type: UpstreamRefused, Status: 403}, UpstreamRefused, 403},
		{&Error{Type: PoolUnavailable}, PoolUnavailable, 503},
	} {
		got := From(tc.err)
		if got.Type != tc.want || got.Code() != tc.code {
			t.Errorf("From(%v) = %s/%d, want %s/%d", tc.err, got.Type, got.Code(), tc.want, tc.code)
		}
	}
	if From(nil) != nil {
		t.Error("From(nil) != nil")
	}
}

func TestHeaderAndBody(t *testing.T) {
	e := &Error{Type: UpstreamAuthRequired, Upstream: "http://proxy.corp:3128", Detail: "upstream \"x\"\nrejected \u00e9gret's credentials"}
	if got, want := e.Header(), `egret; error=upstream_auth_required; next-hop="http://proxy.corp:3128"; details="upstream \"x\""`; got != want {
		t.Errorf("Header() = %s\nwant      %s", got, want)
	}
	body := e.Body()
	if strings.Count(body, "\n") != 1 || !strings.HasPrefix(body, "egret: Bad Gateway: upstream_auth_required (upstream http://proxy.corp:3128): ") {
		t.Errorf("Body() = %q", body)
	}
	e = &Error{Type: HTTPRequestDenied, Detail: "caf\u00e9 denied"}
	if h := e.Header(); h != `egret; error=http_request_denied; details="caf?? denied"` {
		t.Errorf("non-ASCII must not reach a structured field: %s", h)
	}
	rec := httptest.NewRecorder()
	rec.Header().Set("Set-Cookie", "leftover")
	Write(rec, e)
	if rec.Code != 403 || rec.Header().Get("Set-Cookie") != "" || rec.Header().Get("Proxy-Status") == "" {
		t.Errorf("Write: %d %v", rec.Code, rec.Header())
	}
	var b strings.Builder
	WriteRaw(&b, &Error{Type: ConnectionRefused, Detail: "connect to a:1: refused"}, true)
	if !strings.HasPrefix(b.String(), "HTTP/1.1 502 Bad Gateway\r\nProxy-Status: egret; error=connection_refused;") || !strings.Contains(b.String(), "Connection: close\r\n") {
		t.Errorf("WriteRaw:\n%s", b.String())
	}
}

func FuzzHeader(f *testing.F) {
	f.Add("detail", "http://p:1")
	f.Add("a\"b\\c\r\nd", "")
	f.Fuzz(func(t *testing.T, detail, upstream string) {
		h := (&Error{Type: DNSError, Detail: detail, Upstream: upstream}).Header()
		for i := 0; i < len(h); i++ {
			if h[i] < 0x20 || h[i] > 0x7e {
				t.Fatalf("header has byte %#x: %q", h[i], h)
			}
		}
	})
}

// TestTextHidesQuotedLines: the parse errors of net/http and net/textproto
// quote the peer's line, which may carry credentials; Text keeps the reason
// and drops the line.
func TestTextHidesQuotedLines(t *testing.T) {
	for _, err := range []error{
		textproto.ProtocolError(`malformed MIME header line: "Proxy-Authorization : Basic c2VjcmV0"`),
		fmt.Errorf("wrapped: %w", textproto.ProtocolError(`malformed MIME header: missing colon: "Cookie c2VjcmV0"`)),
		fmt.Errorf(`malformed HTTP request %q`, "GET http://u:c2VjcmV0@x/"),
	} {
		got := Text(err)
		if strings.Contains(got, "c2VjcmV0") || !strings.Contains(got, "malformed") {
			t.Errorf("Text(%q) = %q", err, got)
		}
		if d := From(err).Detail; strings.Contains(d, "c2VjcmV0") {
			t.Errorf("From(%q).Detail = %q", err, d)
		}
	}
	if got := Text(errors.New(`bad Content-Length "-5"`)); got != `bad Content-Length "-5"` {
		t.Errorf("an error without a peer line changed: %q", got)
	}
}

func TestScrub(t *testing.T) {
	for in, want := range map[string]string{
		`destination "user:s3cret@host:443": want host:port`: `destination "…@host:443": want host:port`,
		`host "a?token=s3cret": invalid character '?'`:       `host "a…": invalid character '?'`,
		`host "x#frag" and "u:p@y?q=1"`:                      `host "x…" and "…@y…"`,
		`plain "host:80"`:                                    `plain "host:80"`,
		`unbalanced "a@b`:                                    `unbalanced "a@b`,
	} {
		if got := Scrub(in); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", in, got, want)
		}
	}
}

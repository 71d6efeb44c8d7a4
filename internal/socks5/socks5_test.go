package socks5

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

// pipe is a ReadWriter over fixed input that records what was written.
type pipe struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (p *pipe) Read(b []byte) (int, error)  { return p.in.Read(b) }
func (p *pipe) Write(b []byte) (int, error) { return p.out.Write(b) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var (
	greetNoAuth   = []byte{5, 1, 0}
	greetUserPass = []byte{5, 1, 2}
	greetBoth     = []byte{5, 2, 0, 2}
	connectIPv4   = []byte{5, 1, 0, 1, 192, 0, 2, 1, 0, 80}
	connectIPv6   = append(append([]byte{5, 1, 0, 4}, netip.MustParseAddr("2001:db8::1").AsSlice()...), 1, 187)
	connectName   = append(append([]byte{5, 1, 0, 3, 20}, "partner.example.test"...), 1, 187)
	userPass      = append(append(append([]byte{1, 5}, "alice"...), 9), "p@ss:w0rd"...)
	wrongPass     = append(append(append([]byte{1, 5}, "alice"...), 5), "wrong"...)
	okReply       = []byte{5, 0}
	failReply     = func(code ReplyCode) []byte { return []byte{5, byte(code), 0, 1, 0, 0, 0, 0, 0, 0} }
)

var handshakeCases = []struct {
	name    string
	auth    Auth
	in      []byte
	want    Request
	wantOut []byte
	err     error
}{
	{"no-auth-ipv4", Auth{}, cat(greetNoAuth, connectIPv4),
		Request{Command: Connect, Dest: Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 80}}, okReply, nil},
	{"no-auth-ipv6", Auth{}, cat(greetNoAuth, connectIPv6),
		Request{Command: Connect, Dest: Addr{IP: netip.MustParseAddr("2001:db8::1"), Port: 443}}, okReply, nil},
	{"no-auth-domain", Auth{}, cat(greetBoth, connectName),
		Request{Command: Connect, Dest: Addr{Name: "partner.example.test", Port: 443}}, okReply, nil},
	{"user-pass", Auth{Check: StaticCredentials("alice", "p@ss:w0rd")}, cat(greetBoth, userPass, connectName),
		Request{Command: Connect, Dest: Addr{Name: "partner.example.test", Port: 443}, User: "alice"}, []byte{5, 2, 1, 0}, nil},
	{"wrong-password", Auth{Check: StaticCredentials("alice", "p@ss:w0rd")}, cat(greetUserPass, wrongPass, connectName),
		Request{}, []byte{5, 2, 1, 1}, ErrAuthFailed},
	{"credentials-required", Auth{Check: StaticCredentials("alice", "x")}, cat(greetNoAuth, connectIPv4),
		Request{}, []byte{5, 0xff}, ErrNoAcceptableMethod},
	{"no-auth-allowed-beside-credentials", Auth{Check: StaticCredentials("alice", "x"), AllowNoAuth: true}, cat(greetNoAuth, connectIPv4),
		Request{Command: Connect, Dest: Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 80}}, okReply, nil},
	{"user-pass-not-configured", Auth{}, cat(greetUserPass, userPass),
		Request{}, []byte{5, 0xff}, ErrNoAcceptableMethod},
	{"bind-not-supported", Auth{}, cat(greetNoAuth, []byte{5, 2, 0, 1, 192, 0, 2, 1, 0, 80}),
		Request{Command: Bind, Dest: Addr{IP: netip.MustParseAddr("192.0.2.1"), Port: 80}}, cat(okReply, failReply(CommandNotSupported)), ErrCommandNotSupported},
	{"udp-associate-not-supported", Auth{}, cat(greetNoAuth, []byte{5, 3, 0, 1, 0, 0, 0, 0, 0, 0}),
		Request{Command: UDPAssociate, Dest: Addr{IP: netip.MustParseAddr("0.0.0.0")}}, cat(okReply, failReply(CommandNotSupported)), ErrCommandNotSupported},
	{"unknown-address-type", Auth{}, cat(greetNoAuth, []byte{5, 1, 0, 9, 1, 2}),
		Request{}, cat(okReply, failReply(AddressTypeNotSupported)), ErrAddressTypeNotSupported},
	{"empty-domain", Auth{}, cat(greetNoAuth, []byte{5, 1, 0, 3, 0, 0, 80}),
		Request{}, cat(okReply, failReply(GeneralFailure)), ErrMalformed},
	{"reserved-byte", Auth{}, cat(greetNoAuth, []byte{5, 1, 7, 1, 192, 0, 2, 1, 0, 80}),
		Request{}, cat(okReply, failReply(GeneralFailure)), ErrMalformed},
	{"socks4-client", Auth{}, []byte{4, 1, 0, 80, 192, 0, 2, 1, 0}, Request{}, nil, ErrVersion},
	{"http-client", Auth{}, []byte("GET / HTTP/1.1\r\n"), Request{}, nil, ErrVersion},
	{"no-methods", Auth{}, []byte{5, 0}, Request{}, nil, ErrMalformed},
	{"truncated-greeting", Auth{}, []byte{5, 3, 0}, Request{}, nil, ErrMalformed},
	{"truncated-request", Auth{}, cat(greetNoAuth, connectIPv6[:10]), Request{}, cat(okReply, failReply(GeneralFailure)), ErrMalformed},
	{"truncated-password", Auth{Check: StaticCredentials("a", "b")}, cat(greetUserPass, userPass[:9]), Request{}, []byte{5, 2}, ErrMalformed},
	{"bad-auth-version", Auth{Check: StaticCredentials("a", "b")}, cat(greetUserPass, []byte{5, 1, 'a', 1, 'b'}), Request{}, []byte{5, 2}, ErrMalformed},
}

func TestHandshake(t *testing.T) {
	for _, tc := range handshakeCases {
		t.Run(tc.name, func(t *testing.T) {
			var trailer []byte
			if tc.err == nil {
				trailer = []byte("first bytes of the tunnel")
			}
			p := &pipe{in: bytes.NewReader(cat(tc.in, trailer))}
			req, err := Handshake(p, tc.auth)
			if !errors.Is(err, tc.err) || (err != nil) != (tc.err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if req != tc.want {
				t.Fatalf("request %+v, want %+v", req, tc.want)
			}
			if !bytes.Equal(p.out.Bytes(), tc.wantOut) {
				t.Fatalf("wrote %v, want %v", p.out.Bytes(), tc.wantOut)
			}
			if err == nil {
				// Not one byte past the request was consumed.
				rest := make([]byte, 100)
				n, _ := p.in.Read(rest)
				if !bytes.Equal(rest[:n], trailer) {
					t.Fatalf("left %q, want %q", rest[:n], trailer)
				}
				if tc.err == nil && bytes.Contains(p.out.Bytes(), []byte("p@ss")) {
					t.Fatal("password echoed")
				}
			}
			if err != nil && bytes.Contains([]byte(err.Error()), []byte("p@ss")) {
				t.Fatalf("password in error: %v", err)
			}
		})
	}
}

func TestAppendReply(t *testing.T) {
	for _, tc := range []struct {
		name  string
		code  ReplyCode
		bound netip.AddrPort
		want  []byte
	}{
		{"zero", GeneralFailure, netip.AddrPort{}, []byte{5, 1, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"ipv4", Succeeded, netip.MustParseAddrPort("10.0.0.1:4242"), []byte{5, 0, 0, 1, 10, 0, 0, 1, 0x10, 0x92}},
		{"mapped-becomes-ipv4", Succeeded, netip.MustParseAddrPort("[::ffff:10.0.0.1]:1"), []byte{5, 0, 0, 1, 10, 0, 0, 1, 0, 1}},
		{"ipv6", Succeeded, netip.MustParseAddrPort("[::1]:2"), append(append([]byte{5, 0, 0, 4}, netip.IPv6Loopback().AsSlice()...), 0, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AppendReply(nil, tc.code, tc.bound); !bytes.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReplyCodeFor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	_, refused := net.Dial("tcp", closed)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	_, timeout := (&net.Dialer{}).DialContext(ctx, "tcp", closed)
	for _, tc := range []struct {
		name string
		err  error
		want ReplyCode
	}{
		{"nil", nil, Succeeded},
		{"refused", refused, ConnectionRefused},
		{"timeout", timeout, TTLExpired},
		{"dns", &net.DNSError{Err: "no such host", Name: "x.test", IsNotFound: true}, HostUnreachable},
		{"other", errors.New("boom"), GeneralFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReplyCodeFor(tc.err); got != tc.want {
				t.Fatalf("ReplyCodeFor(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}

func FuzzHandshake(f *testing.F) {
	for _, tc := range handshakeCases {
		f.Add(tc.in, tc.auth.Check != nil)
	}
	f.Fuzz(func(t *testing.T, in []byte, withAuth bool) {
		auth := Auth{}
		if withAuth {
			auth.Check = StaticCredentials("alice", "p@ss:w0rd")
		}
		p := &pipe{in: bytes.NewReader(in)}
		req, err := Handshake(p, auth)
		if err != nil {
			return
		}
		if req.Command != Connect || (req.Dest.Name == "" && !req.Dest.IP.IsValid()) {
			t.Fatalf("bad request %+v", req)
		}
		if withAuth && req.User != "alice" {
			t.Fatalf("authenticated as %q", req.User)
		}
		// The request re-encodes to exactly the bytes that were consumed
		// last.
		enc, err := AppendRequest(nil, req)
		if err != nil {
			t.Fatal(err)
		}
		consumed := in[:len(in)-p.in.Len()]
		if !bytes.HasSuffix(consumed, enc) {
			t.Fatalf("request %+v encodes as %v, consumed %v", req, enc, consumed)
		}
	})
}

package sniff

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// clientHello captures the first TLS record a crypto/tls client sends.
func clientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	go func() {
		tls.Client(c, cfg).Handshake()
		c.Close()
	}()
	defer s.Close()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(s, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(s, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// fragment re-splits a single-record ClientHello into records of at most
// size handshake bytes each.
func fragment(rec []byte, size int) []byte {
	hs := rec[5:]
	var out []byte
	for len(hs) > 0 {
		n := min(size, len(hs))
		out = append(out, recordTypeHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, hs[:n]...)
		hs = hs[n:]
	}
	return out
}

func helloCases(t testing.TB) []struct {
	name string
	in   []byte
	want string
	err  error
} {
	// X25519 only keeps most hellos small (fuzz minimisation is quadratic);
	// "tls13-client-post-quantum" is the full-size default hello.
	x25519 := []tls.CurveID{tls.X25519}
	big := clientHello(t, &tls.Config{ServerName: "partner.example.test", InsecureSkipVerify: true})
	named := clientHello(t, &tls.Config{ServerName: "partner.example.test", InsecureSkipVerify: true, CurvePreferences: x25519})
	upper := clientHello(t, &tls.Config{ServerName: "API.Example.Test", InsecureSkipVerify: true, CurvePreferences: x25519})
	tls12 := clientHello(t, &tls.Config{ServerName: "old.example.test", MaxVersion: tls.VersionTLS12, InsecureSkipVerify: true, CurvePreferences: x25519})
	noSNI := clientHello(t, &tls.Config{InsecureSkipVerify: true, CurvePreferences: x25519})
	ipSNI := clientHello(t, &tls.Config{ServerName: "192.0.2.7", InsecureSkipVerify: true, CurvePreferences: x25519})
	badLen := append([]byte(nil), named...)
	badLen[5+1] ^= 0x7f // handshake length no longer matches the body
	return []struct {
		name string
		in   []byte
		want string
		err  error
	}{
		{"tls13-client", named, "partner.example.test", nil},
		{"tls13-client-post-quantum", big, "partner.example.test", nil},
		{"fragmented-post-quantum", fragment(big, 512), "partner.example.test", nil},
		{"lower-cased", upper, "api.example.test", nil},
		{"tls12-client", tls12, "old.example.test", nil},
		{"fragmented-records", fragment(named, 100), "partner.example.test", nil},
		{"one-byte-records", fragment(named, 1), "partner.example.test", nil},
		{"trailing-application-data", append(append([]byte(nil), named...), 23, 3, 3, 0, 1, 0), "partner.example.test", nil},
		{"no-sni", noSNI, "", ErrNoName},
		{"ip-address-no-sni", ipSNI, "", ErrNoName},
		{"empty", nil, "", ErrIncomplete},
		{"header-only", named[:5], "", ErrIncomplete},
		{"half", named[:len(named)/2], "", ErrIncomplete},
		{"http", []byte("GET / HTTP/1.1\r\n"), "", ErrNotTLS},
		{"ssh", []byte("SSH-2.0-OpenSSH_9.2\r\n"), "", ErrNotTLS},
		{"application-data-record", []byte{23, 3, 3, 0, 5, 1, 2, 3, 4, 5}, "", ErrNotTLS},
		{"sslv2-style", []byte{22, 2, 0, 0, 5}, "", ErrNotTLS},
		{"server-hello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, "", ErrNotTLS},
		{"absurd-length", badLen, "", errMalformed},
		{"zero-length-record", []byte{22, 3, 1, 0, 0}, "", errMalformed},
	}
}

// errMalformed stands for "any other error" in the tables.
var errMalformed = errors.New("malformed")

func matchErr(got, want error) bool {
	if want == errMalformed {
		return got != nil && !errors.Is(got, ErrIncomplete) && !errors.Is(got, ErrNotTLS) &&
			!errors.Is(got, ErrNotHTTP) && !errors.Is(got, ErrNoName)
	}
	return errors.Is(got, want) || got == want
}

func TestParseClientHello(t *testing.T) {
	for _, tc := range helloCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseClientHello(tc.in)
			if got != tc.want || !matchErr(err, tc.err) {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			if tc.err == nil && tc.name != "trailing-application-data" {
				for i := range len(tc.in) - 1 {
					if _, err := ParseClientHello(tc.in[:i]); err != ErrIncomplete && !(i == 0 && err == ErrIncomplete) {
						t.Fatalf("prefix %d: %v, want ErrIncomplete", i, err)
					}
				}
			}
		})
	}
}

var httpCases = []struct {
	name string
	in   string
	host string
	port uint16
	err  error
}{
	{"origin-form", "GET /x HTTP/1.1\r\nHost: Partner.Example.Test\r\nAccept: */*\r\n\r\n", "partner.example.test", 0, nil},
	{"host-with-port", "POST /api HTTP/1.1\r\nhost: api.example.test:8080\r\n\r\nbody", "api.example.test", 8080, nil},
	{"host-ows", "GET / HTTP/1.1\r\nHost: \t a.test \r\n\r\n", "a.test", 0, nil},
	{"absolute-form-wins", "GET http://abs.example.test:81/p?q HTTP/1.1\r\nHost: other.test\r\n\r\n", "abs.example.test", 81, nil},
	{"absolute-form-userinfo", "GET http://u:p@abs.test/ HTTP/1.1\r\n\r\n", "abs.test", 0, nil},
	{"connect-authority", "CONNECT tunnel.test:443 HTTP/1.1\r\nHost: tunnel.test:443\r\n\r\n", "tunnel.test", 443, nil},
	{"ipv6-literal", "GET / HTTP/1.1\r\nHost: [2001:DB8::1]:8443\r\n\r\n", "2001:db8::1", 8443, nil},
	{"ipv4-literal", "GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n", "192.0.2.1", 0, nil},
	{"bare-lf", "GET / HTTP/1.1\nHost: lf.test\n\n", "lf.test", 0, nil},
	{"trailing-dot", "GET / HTTP/1.1\r\nHost: dot.test.\r\n\r\n", "dot.test", 0, nil},
	{"http10-no-host", "GET / HTTP/1.0\r\n\r\n", "", 0, ErrNoName},
	{"empty-host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "", 0, ErrNoName},
	{"headers-unfinished", "GET / HTTP/1.1\r\nHost: a.test\r\n", "", 0, ErrIncomplete},
	{"request-line-unfinished", "GET /very/long", "", 0, ErrIncomplete},
	{"method-only", "OPTIONS", "", 0, ErrIncomplete},
	{"http2-preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", 0, ErrNotHTTP},
	{"lowercase-method", "get / HTTP/1.1\r\n", "", 0, ErrNotHTTP},
	{"no-version", "GET /\r\n\r\n", "", 0, ErrNotHTTP},
	{"smtp-like", "EHLO mail.test\r\n", "", 0, ErrNotHTTP},
	{"binary", "\x00\x01\x02", "", 0, ErrNotHTTP},
	{"two-hosts", "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", "", 0, errMalformed},
	{"folding", "GET / HTTP/1.1\r\nHost: a.test\r\n continued\r\n\r\n", "", 0, errMalformed},
	{"bad-host-chars", "GET / HTTP/1.1\r\nHost: a b.test\r\n\r\n", "", 0, errMalformed},
	{"bad-port", "GET / HTTP/1.1\r\nHost: a.test:99999\r\n\r\n", "", 0, errMalformed},
	{"space-in-header-name", "GET / HTTP/1.1\r\nHo st: a.test\r\n\r\n", "", 0, errMalformed},
	{"unbracketed-ipv6", "GET / HTTP/1.1\r\nHost: 2001:db8::1\r\n\r\n", "", 0, errMalformed},
	{"relative-without-slash", "GET foo HTTP/1.1\r\nHost: a.test\r\n\r\n", "", 0, errMalformed},
	// Issue 11: net/http reads "A:://0" as scheme "A" with an opaque path,
	// and the Host header ("1") names the host; sniff read authority "0".
	{"colon-before-scheme-separator", "A A:://0 HTTP/1.0\nHost:1\n\n", "", 0, errMalformed},
	{"scheme-starts-with-digit", "GET 1http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n", "", 0, errMalformed},
	{"scheme-with-plus", "GET svn+ssh://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n", "a.test", 0, nil},
	{"opaque-absolute", "GET http:a.test HTTP/1.1\r\nHost: b.test\r\n\r\n", "", 0, errMalformed},
	{"empty-authority", "GET http:///p HTTP/1.1\r\nHost: b.test\r\n\r\n", "", 0, errMalformed},
	{"query-before-slash", "GET http://a.test?x=/y HTTP/1.1\r\nHost: b.test\r\n\r\n", "a.test", 0, nil},
	{"userinfo-last-at", "GET http://u@v@a.test/ HTTP/1.1\r\n\r\n", "a.test", 0, nil},
	{"userinfo-with-slash-in-query", "GET http://a.test?u@b.test HTTP/1.1\r\n\r\n", "a.test", 0, nil},
	{"double-slash-origin-form", "GET //a.test/p HTTP/1.1\r\nHost: b.test\r\n\r\n", "b.test", 0, nil},
}

func TestParseHTTP(t *testing.T) {
	for _, tc := range httpCases {
		t.Run(tc.name, func(t *testing.T) {
			host, port, err := ParseHTTP([]byte(tc.in))
			if host != tc.host || port != tc.port || !matchErr(err, tc.err) {
				t.Fatalf("got %q %d %v; want %q %d %v", host, port, err, tc.host, tc.port, tc.err)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Proto
	}{
		{"empty", "", Unknown},
		{"tls", "\x16\x03\x01", TLS},
		{"tls-first-byte", "\x16", TLS},
		{"http", "GET ", HTTP},
		{"http-prefix", "DEL", HTTP},
		{"m-search", "M-SEARCH * HTTP/1.1", HTTP},
		{"ssh", "SSH-2.0", Unknown},
		{"method-so-far", "SSH", HTTP}, // a plausible method until more arrives
		{"mysql-greeting", "\x4a\x00\x00\x00", Unknown},
		{"postgres", "\x00\x00\x00\x08\x04\xd2\x16\x2f", Unknown},
		{"lowercase", "get ", Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify([]byte(tc.in)); got != tc.want {
				t.Fatalf("Classify(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// malformedHello is hello with a session ID length that runs past the
// message.
func malformedHello(hello []byte) []byte {
	b := append([]byte(nil), hello...)
	b[5+4+2+32] = 0xff
	return b
}

func TestSniff(t *testing.T) {
	hello := clientHello(t, &tls.Config{ServerName: "partner.example.test", InsecureSkipVerify: true})
	big := "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 64<<10)
	// Generous bounds where the case is not about time: the machine may be
	// loaded, and -race is slow.
	patient := Options{FirstByteTimeout: 5 * time.Second, Timeout: 10 * time.Second}
	for _, tc := range []struct {
		name   string
		chunks []string // written with a pause between them
		close  bool     // client closes after writing
		opts   Options
		want   Result
		peek   int // expected len(Peeked); -1 = everything written
		err    bool
	}{
		{"tls-in-pieces", []string{string(hello[:3]), string(hello[3:50]), string(hello[50:])}, false, patient,
			Result{Proto: TLS, Host: "partner.example.test"}, -1, false},
		{"http", []string{"GET /a HTTP/1.1\r\nHost: web.test:8080\r\n", "\r\n"}, false, patient,
			Result{Proto: HTTP, Host: "web.test", Port: 8080}, -1, false},
		{"server-first-protocol", nil, false, Options{FirstByteTimeout: 50 * time.Millisecond},
			Result{Proto: Unknown, Cut: CutTimeout}, 0, false},
		{"unknown-binary", []string{"\x00\x00\x00\x08\x04\xd2\x16\x2f"}, false, patient,
			Result{Proto: Unknown}, -1, false},
		{"slow-headers-time-out", []string{"GET / HTTP/1.1\r\nHost: a.test\r\n"}, false, Options{FirstByteTimeout: 5 * time.Second, Timeout: 300 * time.Millisecond},
			Result{Proto: HTTP, Cut: CutTimeout}, -1, false},
		{"slow-hello-times-out", []string{string(hello[:5])}, false, Options{FirstByteTimeout: 5 * time.Second, Timeout: 300 * time.Millisecond},
			Result{Proto: TLS, Cut: CutTimeout}, -1, false},
		{"size-bound", []string{big}, false, Options{MaxBytes: 4096, FirstByteTimeout: 5 * time.Second, Timeout: 10 * time.Second}, Result{Proto: HTTP, Cut: CutMaxBytes}, 4096, false},
		{"hello-size-bound", []string{string(hello)}, false, Options{MaxBytes: 100, FirstByteTimeout: 5 * time.Second, Timeout: 10 * time.Second}, Result{Proto: TLS, Cut: CutMaxBytes}, 100, false},
		{"malformed-hello", []string{string(malformedHello(hello))}, false, patient, Result{Proto: TLS, Cut: CutMalformed}, -1, false},
		{"malformed-http", []string{"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"}, false, patient, Result{Proto: HTTP, Cut: CutMalformed}, -1, false},
		{"client-closes-early", []string{"GET / HT"}, true, patient, Result{Proto: HTTP, Cut: CutClosed}, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := pair(t)
			written := strings.Join(tc.chunks, "")
			go func() {
				for i, ch := range tc.chunks {
					if i > 0 {
						time.Sleep(20 * time.Millisecond)
					}
					client.Write([]byte(ch))
				}
				if tc.close {
					client.(*net.TCPConn).CloseWrite()
				}
			}()
			start := time.Now()
			res, err := Sniff(server, tc.opts)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v", err)
			}
			if res.Proto != tc.want.Proto || res.Host != tc.want.Host || res.Port != tc.want.Port || res.Cut != tc.want.Cut {
				t.Fatalf("got %s %q %d cut %q, want %s %q %d cut %q", res.Proto, res.Host, res.Port, res.Cut, tc.want.Proto, tc.want.Host, tc.want.Port, tc.want.Cut)
			}
			wantPeek := tc.peek
			if wantPeek < 0 {
				wantPeek = len(written)
			}
			if len(res.Peeked) != wantPeek || !strings.HasPrefix(written, string(res.Peeked)) {
				t.Fatalf("peeked %d bytes, want %d (a prefix of what was written)", len(res.Peeked), wantPeek)
			}
			// Finishing early (a complete message, the size bound, EOF) must
			// not wait for the timeout.
			if took := time.Since(start); tc.opts.Timeout >= 10*time.Second && took > 4*time.Second {
				t.Fatalf("Sniff took %s", took)
			}
			if tc.name == "server-first-protocol" {
				// Silence costs FirstByteTimeout, not Timeout (3s).
				if took := time.Since(start); took > 2*time.Second {
					t.Fatalf("a silent client held Sniff for %s", took)
				}
				// The deadline Sniff used is cleared.
				go func() { time.Sleep(100 * time.Millisecond); client.Write([]byte("x")) }()
				if _, err := server.Read(make([]byte, 1)); err != nil {
					t.Fatalf("read after Sniff: %v", err)
				}
				return
			}
			// Nothing is lost: the replaying Conn yields the whole stream.
			if !tc.close {
				go func() {
					client.Write([]byte("|after"))
					client.(*net.TCPConn).CloseWrite()
				}()
				server.SetReadDeadline(time.Now().Add(5 * time.Second))
				all, err := io.ReadAll(NewConn(server, res.Peeked))
				if err != nil {
					t.Fatal(err)
				}
				if want := written + "|after"; string(all) != want {
					t.Fatalf("replayed %d bytes, want %d", len(all), len(want))
				}
			}
		})
	}
}

func TestConnWriteTo(t *testing.T) {
	client, server := pair(t)
	go func() {
		client.Write([]byte("world"))
		client.Close()
	}()
	var buf bytes.Buffer
	n, err := NewConn(server, []byte("hello ")).WriteTo(&buf)
	if err != nil || n != 11 || buf.String() != "hello world" {
		t.Fatalf("WriteTo = %d, %v, %q", n, err, buf.String())
	}
}

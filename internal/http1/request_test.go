package http1

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// bytesConn is a net.Conn that reads from a fixed input.
type bytesConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *bytesConn) Read(p []byte) (int, error)         { return c.r.Read(p) }
func (c *bytesConn) SetReadDeadline(time.Time) error    { return nil }
func newBytesConn(s string) *bytesConn                  { return &bytesConn{r: bytes.NewReader([]byte(s))} }
func (c *bytesConn) Write(p []byte) (int, error)        { return len(p), nil }
func (c *bytesConn) Close() error                       { return nil }
func (c *bytesConn) SetDeadline(t time.Time) error      { return nil }
func (c *bytesConn) SetWriteDeadline(t time.Time) error { return nil }

func readOne(raw string, max int) (*http.Request, error) {
	r := &Reader{MaxHeaderBytes: max}
	r.Reset(newBytesConn(raw))
	defer r.Release()
	if err := r.Start(); err != nil {
		return nil, err
	}
	return r.Read()
}

func TestReaderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"te-and-cl", "POST http://o/ HTTP/1.1\r\nHost: o\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", 400},
		{"two-lengths", "POST http://o/ HTTP/1.1\r\nHost: o\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
		{"unknown-coding", "POST http://o/ HTTP/1.1\r\nHost: o\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
		{"no-host-1.1", "GET http://o/ HTTP/1.1\r\n\r\n", 400},
		{"folded-host", "GET http://o/ HTTP/1.1\r\nHost: o\r\n x\r\n\r\n", 400},
		{"http2", "GET http://o/ HTTP/2.0\r\nHost: o\r\n\r\n", 505},
		{"expectation", "PUT http://o/ HTTP/1.1\r\nHost: o\r\nExpect: teapot\r\nContent-Length: 1\r\n\r\nx", 417},
		{"header-too-large", "GET http://o/ HTTP/1.1\r\nHost: o\r\nX: " + strings.Repeat("a", 2*DefaultMaxHeaderBytes) + "\r\n\r\n", 431},
		{"credential-line-not-quoted", "GET http://o/ HTTP/1.1\r\nHost: o\r\nProxy-Authorization Basic c2VjcmV0\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readOne(tc.raw, 0)
			pe, ok := err.(interface{ Code() int })
			if !ok || pe.Code() != tc.status {
				t.Fatalf("got %v, want a %d", err, tc.status)
			}
			if strings.Contains(err.Error(), "c2VjcmV0") {
				t.Errorf("the error quotes the client's line: %v", err)
			}
		})
	}
}

func TestReaderSkipsEmptyLinesAndPipelines(t *testing.T) {
	r := &Reader{}
	r.Reset(newBytesConn("\r\n\r\nGET http://o/1 HTTP/1.1\r\nHost: o\r\n\r\nGET http://o/2 HTTP/1.1\r\nHost: o\r\n\r\n"))
	defer r.Release()
	for _, want := range []string{"/1", "/2"} {
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		req, err := r.Read()
		if err != nil || req.URL.Path != want {
			t.Fatalf("got %v %v, want %s", req, err, want)
		}
	}
}

// FuzzReader: whatever Reader accepts, net/http's reader reads the same
// way (method, target, Host, length); Reader never accepts a request with
// both Transfer-Encoding and Content-Length.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"GET http://o/ HTTP/1.1\r\nHost: o\r\n\r\n",
		"POST http://o/ HTTP/1.1\r\nHost: o\r\nContent-Length: 3\r\n\r\nabc",
		"POST http://o/ HTTP/1.1\r\nHost: o\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		"\n\nCONNECT o:443 HTTP/1.1\r\nHost: o:443\r\n\r\n",
		"GET http://o/ HTTP/1.0\r\n\r\n",
		"GET http://o/ HTTP/1.1\r\nHost: o\r\n\tfold\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		req, err := readOne(raw, 1024)
		if err != nil {
			return
		}
		want, werr := http.ReadRequest(bufio.NewReader(strings.NewReader(strings.TrimLeft(raw, "\r\n"))))
		if werr != nil {
			t.Fatalf("Reader accepted what net/http refuses (%v): %q", werr, raw)
		}
		if req.Method != want.Method || req.Host != want.Host || req.URL.String() != want.URL.String() || req.ContentLength != want.ContentLength {
			t.Fatalf("Reader read %s %s %s %d, net/http %s %s %s %d: %q", req.Method, req.Host, req.URL, req.ContentLength, want.Method, want.Host, want.URL, want.ContentLength, raw)
		}
		head := raw
		if i := strings.Index(head, "\n\r\n"); i >= 0 {
			head = head[:i]
		}
		if i := strings.Index(head, "\n\n"); i >= 0 {
			head = head[:i]
		}
		if len(req.TransferEncoding) > 0 && strings.Contains(strings.ToLower(head), "\ncontent-length:") {
			t.Fatalf("accepted Transfer-Encoding beside Content-Length: %q", raw)
		}
	})
}

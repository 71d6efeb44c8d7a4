package http1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestRemoveHopByHop(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         http.Header
		keep, gone []string
	}{
		{"fixed-list", http.Header{"Connection": {"close"}, "Keep-Alive": {"x"}, "Proxy-Authorization": {"Basic x"}, "Te": {"trailers"},
			"Trailer": {"X"}, "Transfer-Encoding": {"chunked"}, "Upgrade": {"ws"}, "Proxy-Connection": {"keep-alive"}, "X-App": {"1"}},
			[]string{"X-App"}, []string{"Connection", "Keep-Alive", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Connection"}},
		{"named-in-connection", http.Header{"Connection": {"X-Hop, keep-alive", " x-other "}, "X-Hop": {"1"}, "X-Other": {"2"}, "X-App": {"3"}},
			[]string{"X-App"}, []string{"X-Hop", "X-Other"}},
		{"framing-always-out", http.Header{"Connection": {"Content-Length"}, "Content-Length": {"5"}, "Host": {"h"}, "X-App": {"1"}},
			[]string{"X-App"}, []string{"Content-Length", "Host"}},
		{"framing-out-without-connection", http.Header{"Content-Length": {"5"}, "Transfer-Encoding": {"chunked"}},
			nil, []string{"Content-Length", "Transfer-Encoding"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			RemoveHopByHop(tc.in)
			for _, k := range tc.keep {
				if _, ok := tc.in[k]; !ok {
					t.Errorf("%s removed", k)
				}
			}
			for _, k := range tc.gone {
				if _, ok := tc.in[k]; ok {
					t.Errorf("%s kept", k)
				}
			}
		})
	}
}

func TestViaHas(t *testing.T) {
	for v, want := range map[string]bool{
		"1.1 egret-a (egret)":               true,
		"1.0 fred, 1.1 EGRET-A":             true,
		"1.1 egret-ab (egret)":              false,
		"egret-a":                           false, // no protocol: not a received-by
		"1.1 proxy.corp, HTTP/1.1 egret-a ": true,
	} {
		if got := ViaHas(v, "egret-a"); got != want {
			t.Errorf("ViaHas(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestHeaderLength(t *testing.T) {
	for v, want := range map[string]int64{"": -1, "0": 0, " 42 ": 42, "-1": -1, "x": -1} {
		h := http.Header{}
		if v != "" {
			h.Set("Content-Length", v)
		}
		if got := HeaderLength(h); got != want {
			t.Errorf("HeaderLength(%q) = %d, want %d", v, got, want)
		}
	}
}

// parseRequest reads one request from raw with net/http's reader.
func parseRequest(t testing.TB, raw string) *http.Request {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatalf("parse %q: %v", raw, err)
	}
	return req
}

// TestWriteRequestHeadFraming: what WriteRequestHead writes frames the body
// egret sends, whatever the client's header said about framing.
func TestWriteRequestHeadFraming(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      Framing
	}{
		{"length", "POST http://o/a HTTP/1.1\r\nHost: o\r\nContent-Length: 5\r\n\r\nhello", Framing{Kind: BodyLength, Length: 5}},
		{"length-named-in-connection", "POST http://o/a HTTP/1.1\r\nHost: o\r\nConnection: keep-alive, Content-Length\r\nContent-Length: 5\r\n\r\nhello", Framing{Kind: BodyLength, Length: 5}},
		{"chunked-named-in-connection", "POST http://o/a HTTP/1.1\r\nHost: o\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", Framing{Kind: BodyChunked}},
		{"post-without-body", "POST http://o/a HTTP/1.1\r\nHost: o\r\n\r\n", Framing{Zero: true}},
		{"get-without-body", "GET http://o/a HTTP/1.1\r\nHost: o\r\n\r\n", Framing{}},
		{"explicit-zero", "DELETE http://o/a HTTP/1.1\r\nHost: o\r\nContent-Length: 0\r\n\r\n", Framing{Zero: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := parseRequest(t, tc.raw)
			var f Forward
			if e := f.Prepare(req); e != nil {
				t.Fatal(e)
			}
			if f.Framing != tc.want {
				t.Fatalf("framing %+v, want %+v", f.Framing, tc.want)
			}
			body, _ := io.ReadAll(req.Body)
			var out bytes.Buffer
			bw := bufio.NewWriter(&out)
			WriteRequestHead(bw, req, &RequestHead{Scheme: "http", Host: "o", Via: "1.1 e (egret)", Framing: f.Framing}, nil)
			switch f.Framing.Kind {
			case BodyLength:
				bw.Write(body)
			case BodyChunked:
				bw.WriteString("5\r\nhello\r\n0\r\n\r\n")
			}
			bw.Flush()
			got := parseRequest(t, out.String())
			gotBody, err := io.ReadAll(got.Body)
			if err != nil || !bytes.Equal(gotBody, body) {
				t.Fatalf("the next hop read body %q (%v), want %q; wire:\n%s", gotBody, err, body, out.String())
			}
			if n := strings.Count(strings.ToLower(out.String()), "content-length:") + strings.Count(strings.ToLower(out.String()), "transfer-encoding:"); n > 1 {
				t.Errorf("%d framing fields on the wire:\n%s", n, out.String())
			}
			if got.Host != "o" || got.URL.Path != "/a" {
				t.Errorf("target %s %s", got.Host, got.URL.Path)
			}
		})
	}
}

// FuzzWriteRequestHead: for any request net/http reads, the head egret
// writes (with the body it forwards) parses back with net/http's reader to
// the same method, target and body, and carries at most one framing field.
func FuzzWriteRequestHead(f *testing.F) {
	for _, s := range []string{
		"POST http://o/a HTTP/1.1\r\nHost: o\r\nContent-Length: 5\r\n\r\nhello",
		"POST http://o/a HTTP/1.1\r\nHost: o\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello",
		"PUT http://o/a?q=1 HTTP/1.1\r\nHost: o\r\nTransfer-Encoding: chunked\r\nConnection: te, transfer-encoding, host\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"GET http://o/ HTTP/1.0\r\nConnection: Host, Via\r\nVia: 1.0 a\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil || req.URL.Host == "" || !req.URL.IsAbs() {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		var fw Forward
		if fw.Prepare(req) != nil {
			return
		}
		var out bytes.Buffer
		bw := bufio.NewWriter(&out)
		WriteRequestHead(bw, req, &RequestHead{Scheme: "http", Host: req.URL.Host, Via: "1.1 e (egret)", Framing: fw.Framing}, nil)
		switch fw.Framing.Kind {
		case BodyLength:
			bw.Write(body)
		case BodyChunked:
			if len(body) > 0 {
				bw.WriteString(strings.ToUpper(strconvHex(len(body))) + "\r\n")
				bw.Write(body)
				bw.WriteString("\r\n")
			}
			bw.WriteString("0\r\n\r\n")
		}
		bw.Flush()
		br := bufio.NewReader(&out)
		got, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("the next hop cannot read what egret wrote: %v\n%q", err, out.String())
		}
		gotBody, err := io.ReadAll(got.Body)
		if err != nil || !bytes.Equal(gotBody, body) || got.Method != req.Method || got.URL.RequestURI() != req.URL.RequestURI() {
			t.Fatalf("next hop read %s %s body %q (%v), want %s %s body %q\n%q", got.Method, got.URL.RequestURI(), gotBody, err, req.Method, req.URL.RequestURI(), body, out.String())
		}
		if br.Buffered() > 0 {
			t.Fatalf("bytes after the message: a second request hides in\n%q", out.String())
		}
	})
}

func strconvHex(n int) string {
	const digits = "0123456789abcdef"
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 16 {
		b = append([]byte{digits[n%16]}, b...)
	}
	return string(b)
}

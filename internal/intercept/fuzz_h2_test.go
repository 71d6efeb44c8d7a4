package intercept

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Rig is an Engine serving raw HTTP/2 clients: each connection is
// handed to Serve as an admitted tunnel to one echo origin.
type h2Rig struct {
	l    *lab
	site *Site
	addr string // where the engine accepts (TLS, ALPN h2)
	pool *x509.CertPool
	host string
	port string
	last sync.Map // request id → what the origin saw
}

func newH2Rig(t testing.TB) *h2Rig {
	l := newLab(t)
	r := &h2Rig{l: l, host: "api.example.test"}
	origin := l.origin(r.host, nil, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n, _ := io.Copy(io.Discard, req.Body)
		r.last.Store(req.Header.Get("X-Fuzz-Id"), seen{Method: req.Method, Path: req.URL.EscapedPath(), Headers: req.Header, Body: int(n)})
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]int{"body": int(n)})
	}))
	_, r.port, _ = net.SplitHostPort(origin)
	site, _ := apiSite(t, r.host, testRules)
	r.site = site
	r.pool = x509.NewCertPool()
	r.pool.AppendCertsFromPEM(l.caCert)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				l.engine.Serve(ctx, c, &Tunnel{Host: r.host, Port: r.port, Client: "fuzz", Site: site,
					Dial: func(ctx context.Context) (net.Conn, error) {
						var d net.Dialer
						return d.DialContext(ctx, "tcp", origin)
					}})
			})
		}
	}()
	return r
}

// h2Answer is what the raw client got back.
type h2Answer struct {
	status string
	reset  bool // RST_STREAM or GOAWAY instead of an answer
}

// send opens a connection, sends one request made of fields (pseudo and
// regular, in order, as given) and body, and reads the answer.
func (r *h2Rig) send(t testing.TB, fields [][2]string, body []byte) h2Answer {
	c, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: r.host, RootCAs: r.pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: len(body) == 0})
	if len(body) > 0 {
		fr.WriteData(1, true, body)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return h2Answer{reset: true}
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				return h2Answer{status: f.PseudoValue("status")}
			}
		case *http2.RSTStreamFrame:
			return h2Answer{reset: true}
		case *http2.GoAwayFrame:
			return h2Answer{reset: true}
		}
	}
}

// FuzzH2Request sends arbitrary HTTP/2 requests — method, path,
// authority, one extra field, a body — through the engine: whatever comes
// in, the engine answers or resets (it never hangs or crashes), a request
// the rules deny never reaches the origin, and a request that reaches it
// carries egret's credential and never the client's, with the path exactly
// as sent.
func FuzzH2Request(f *testing.F) {
	f.Add("GET", "/v1/models", "api.example.test", "authorization", "Bearer client", []byte(nil))
	f.Add("POST", "/v1/chat/completions", "api.example.test", "x-api-key", "k", []byte("{}"))
	f.Add("GET", "/v1/x/../admin/y", "api.example.test", "x", "y", []byte(nil))
	f.Add("GET", "/v1/%61dmin/y", "API.example.test:443", "te", "trailers", []byte(nil))
	f.Add("CONNECT", "", "evil.example:443", "", "", []byte(nil))
	f.Add("GET", "*", "", "connection", "close", []byte(nil))
	f.Add("DELETE", "/public/a", "other.example.test", ":path", "/v1/models", []byte("x"))
	f.Add("delete", "/public/a", "api.example.test", "host", "other.example.test", []byte(nil))
	f.Add("GET", "/v1/models", "api.example.test", "host", "internal.example.test", []byte(nil))
	r := newH2Rig(f)
	var id int
	f.Fuzz(func(t *testing.T, method, path, authority, name, value string, body []byte) {
		id++
		fid := strings.Repeat("f", 1) + string(rune('a'+id%26)) + time.Now().Format("150405.000000000")
		fields := [][2]string{{":method", method}, {":scheme", "https"}, {":authority", authority}}
		if method != "CONNECT" {
			fields = append(fields, [2]string{":path", path})
		}
		fields = append(fields, [2]string{"x-fuzz-id", fid}, [2]string{"authorization", "Bearer " + clientToken})
		if name != "" {
			fields = append(fields, [2]string{name, value})
		}
		if len(body) > 1<<14 {
			body = body[:1<<14]
		}
		ans := r.send(t, fields, body)
		v, reached := r.last.Load(fid)
		if !reached {
			return
		}
		s := v.(seen)
		if ans.status != "200" && !ans.reset {
			t.Fatalf("the origin got %s %q but the client was told %s", s.Method, s.Path, ans.status)
		}
		if d := r.site.Rules.Decide(s.Method, s.Path); d.Denied {
			t.Fatalf("%s %q reached the origin though the rules deny it (%s)", s.Method, s.Path, d.RuleName())
		}
		if s.Path != path {
			t.Fatalf("sent path %q, the origin saw %q", path, s.Path)
		}
		if got := s.Headers["Authorization"]; len(got) != 1 || got[0] != "Bearer "+injectedToken {
			t.Fatalf("the origin saw Authorization %q", got)
		}
		if got := s.Headers["X-Api-Key"]; len(got) != 1 || got[0] != injectedKey {
			t.Fatalf("the origin saw x-api-key %q", got)
		}
	})
}

// TestH2Rig: the rig reaches the origin for an allowed request and gets
// 403 for a denied one, so FuzzH2Request's checks have something to check.
func TestH2Rig(t *testing.T) {
	r := newH2Rig(t)
	for _, tc := range []struct {
		method, path, want string
		reach              bool
	}{{"GET", "/v1/models", "200", true}, {"GET", "/v1/admin/x", "403", false}, {"GET", "/v1/%2e%2e/v1/admin/x", "403", false}} {
		fid := "rig-" + tc.path
		ans := r.send(t, [][2]string{{":method", tc.method}, {":scheme", "https"}, {":authority", r.host}, {":path", tc.path}, {"x-fuzz-id", fid}}, nil)
		_, reached := r.last.Load(fid)
		if ans.status != tc.want || reached != tc.reach {
			t.Errorf("%s %s: %+v, reached %v", tc.method, tc.path, ans, reached)
		}
	}
}

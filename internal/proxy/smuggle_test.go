package proxy

// Request smuggling through Connection (issue 11, section 1), tested on the
// raw wire: the next hop is a TCP listener that parses what egret sent with
// net/http's reader and records every request, per connection, with its
// raw header section and its body; clients write and read bytes, never
// through Go's client (which would normalise the attack away).
//
// The rule under test: framing is egret's own on every hop. The length or
// chunking of what egret writes is computed from the message it read,
// never from header fields that survived hop-by-hop removal, and Host is
// written from the request target; a Connection field naming
// Content-Length, Transfer-Encoding, Host... never changes how a message is
// framed or where it goes. The fields it names are otherwise removed as
// hop-by-hop.

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"

	"egret.io/egret/internal/http1"
)

// wireReq is one request a wirePeer parsed from the bytes it received.
type wireReq struct {
	conn, seq int    // the peer's connection and request numbers, from 1
	head      string // the request line and header section, as received
	method    string
	target    string // the request target as received
	path      string
	host      string
	header    http.Header
	chunked   bool
	length    int64 // the parsed Content-Length; -1 for none
	body      string
	bodyErr   error
}

func (r wireReq) String() string {
	s := fmt.Sprintf("#%d (connection %d) %s %s body %s", r.seq, r.conn, r.method, r.target, clip([]byte(r.body)))
	if r.bodyErr != nil {
		s += " (reading the body failed: " + r.bodyErr.Error() + ")"
	}
	return s
}

// wireAnswer answers r on the connection c (br reads what follows it) and
// reports whether the connection carries on.
type wireAnswer func(r *wireReq, c net.Conn, br *bufio.Reader) bool

// wirePeer is an origin or an upstream member on loopback that records
// what egret sent it: every request net/http's reader finds in the bytes of
// each connection. Its answers say which request they answer (echoAnswer).
type wirePeer struct {
	addr, port string
	// answer writes the response to each request; nil means echoAnswer.
	answer wireAnswer
	// interim is written before the body is read, for a request that
	// expects 100-continue; nil means "HTTP/1.1 100 Continue", sent
	// whatever the request's length (an origin may).
	interim func(r *wireReq) string
	mu      sync.Mutex
	reqs    []wireReq
	raw     map[int][]byte // every byte received, per connection
	errs    []string       // bytes that did not parse as requests
	nconn   int
	seq     int
	active  int           // connection handlers running
	idle    chan struct{} // closed when active drops to 0, for settle
}

// startWire starts a wirePeer on a loopback port.
func startWire(t testing.TB, answer wireAnswer) *wirePeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wirePeer{addr: ln.Addr().String(), answer: answer, raw: map[int][]byte{}}
	_, w.port, _ = net.SplitHostPort(w.addr)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w.mu.Lock()
			w.active++
			w.mu.Unlock()
			go w.serveConn(c)
		}
	}()
	return w
}

// tapReader keeps a copy of every byte read through it.
type tapReader struct {
	r   io.Reader
	buf []byte
}

func (t *tapReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.buf = append(t.buf, p[:n]...)
	return n, err
}

func (w *wirePeer) serveConn(c net.Conn) {
	defer func() {
		w.mu.Lock()
		if w.active--; w.active == 0 && w.idle != nil {
			close(w.idle)
			w.idle = nil
		}
		w.mu.Unlock()
	}()
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	w.mu.Lock()
	w.nconn++
	id := w.nconn
	w.mu.Unlock()
	tap := &tapReader{r: c}
	br := bufio.NewReader(tap)
	defer func() {
		w.mu.Lock()
		w.raw[id] = tap.buf
		w.mu.Unlock()
	}()
	for {
		start := len(tap.buf) - br.Buffered()
		req, err := http.ReadRequest(br)
		if err != nil {
			// The end of the connection between requests is clean; any
			// other failure, or bytes left over, is not.
			if len(tap.buf) > start || !endOfConn(err) {
				w.fail("connection %d: %v, reading %s", id, err, clip(tap.buf[start:]))
			}
			return
		}
		end := len(tap.buf) - br.Buffered()
		r := wireReq{conn: id, head: string(tap.buf[start:end]), method: req.Method, target: req.RequestURI,
			path: req.URL.Path, host: req.Host, header: req.Header.Clone(),
			chunked: len(req.TransferEncoding) > 0, length: req.ContentLength}
		if !r.chunked && req.Header.Get("Content-Length") == "" {
			r.length = -1
		}
		if httpguts.HeaderValuesContainsToken(req.Header["Expect"], "100-continue") {
			interim := "HTTP/1.1 100 Continue\r\n\r\n"
			if w.interim != nil {
				interim = w.interim(&r)
			}
			io.WriteString(c, interim)
		}
		b, err := io.ReadAll(req.Body)
		r.body, r.bodyErr = string(b), err
		w.mu.Lock()
		w.seq++
		r.seq = w.seq
		w.reqs = append(w.reqs, r)
		w.raw[id] = tap.buf[:len(tap.buf):len(tap.buf)] // the handler only appends
		w.mu.Unlock()
		if err != nil {
			return // the request shows the failure
		}
		answer := w.answer
		if answer == nil {
			answer = echoAnswer
		}
		if !answer(&r, c, br) || req.Close {
			return
		}
	}
}

// endOfConn reports whether err is the peer closing (or resetting) the
// connection.
func endOfConn(err error) bool {
	var ne net.Error
	return err == io.EOF || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed) || errors.As(err, &ne)
}

func (w *wirePeer) fail(format string, args ...any) {
	w.mu.Lock()
	w.errs = append(w.errs, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// answerBody is the body of echoAnswer's answer to r.
func answerBody(method, path string) string { return "answer to " + method + " " + path }

// echoAnswer answers every request with 200 and a body naming it; the
// header X-Answer-To names it too, and X-Wire-Seq gives its number.
func echoAnswer(r *wireReq, c net.Conn, _ *bufio.Reader) bool {
	body := answerBody(r.method, r.path)
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 200 OK\r\nX-Answer-To: %s %s\r\nX-Wire-Seq: %d\r\nContent-Length: %d\r\n\r\n", r.method, r.path, r.seq, len(body))
	if r.method != http.MethodHead {
		b.WriteString(body)
	}
	_, err := io.WriteString(c, b.String())
	return err == nil
}

// settle waits until the peer has read everything egret sent it: egret's
// idle connections are closed (busy ones close when they come back) and
// every connection handler has seen the end of its connection.
func (w *wirePeer) settle(t testing.TB, p *testProxy) {
	t.Helper()
	p.RetireConnections()
	w.mu.Lock()
	if w.active == 0 {
		w.mu.Unlock()
		return
	}
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	done := w.idle
	w.mu.Unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("egret kept connections to %s open after RetireConnections; received so far:\n%s", w.addr, w.dump())
	}
}

// requests returns what the peer received, and the failures to parse it.
func (w *wirePeer) requests() ([]wireReq, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireReq(nil), w.reqs...), append([]string(nil), w.errs...)
}

// reset forgets what the peer received (between fuzz iterations, settled).
func (w *wirePeer) reset() {
	w.mu.Lock()
	w.reqs, w.errs, w.raw = nil, nil, map[int][]byte{}
	w.mu.Unlock()
}

// dump shows every byte the peer received, per connection.
func (w *wirePeer) dump() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for i := 1; i <= w.nconn; i++ {
		if raw, ok := w.raw[i]; ok {
			fmt.Fprintf(&b, "  connection %d: %s\n", i, clip(raw))
		}
	}
	for _, r := range w.reqs {
		fmt.Fprintf(&b, "  request %s\n", r)
	}
	for _, e := range w.errs {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	return b.String()
}

// clip quotes b, eliding the middle of a long one.
func clip(b []byte) string {
	if len(b) <= 600 {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%q...(%d bytes)...%q", b[:400], len(b)-600, b[len(b)-200:])
}

// wireClient is a client connection to egret that writes raw bytes and
// reads responses with net/http's reader, keeping every byte received.
type wireClient struct {
	t   testing.TB
	c   net.Conn
	tap *tapReader
	br  *bufio.Reader
}

func dialWire(t testing.TB, addr string) *wireClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(15 * time.Second))
	tap := &tapReader{r: c}
	return &wireClient{t: t, c: c, tap: tap, br: bufio.NewReader(tap)}
}

func (c *wireClient) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// read reads one response (interim ones too) to a request of method, and
// returns it with its raw header section and its body. A final response
// with a body but no framing on a connection egret does not close fails
// the test at once: the client could not tell where it ends.
func (c *wireClient) read(method string) (*http.Response, string, string) {
	c.t.Helper()
	start := len(c.tap.buf) - c.br.Buffered()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("read the response to %s: %v (received %s)", method, err, clip(c.tap.buf[start:]))
	}
	head := string(c.tap.buf[start : len(c.tap.buf)-c.br.Buffered()])
	code := resp.StatusCode
	hasBody := method != http.MethodHead && code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
	if hasBody && resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 &&
		!httpguts.HeaderValuesContainsToken(resp.Header["Connection"], "close") {
		c.t.Fatalf("egret sent a response with a body and no framing on a connection it keeps open:\n%s", head)
	}
	if code < 200 || code == http.StatusSwitchingProtocols {
		return resp, head, ""
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("read the body of %d: %v (received %s)", code, err, clip(c.tap.buf[start:]))
	}
	return resp, head, string(b)
}

// closed reports whether egret closed the connection with nothing more
// sent (EOF or reset within 5s).
func (c *wireClient) closed() bool {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.c.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := c.br.ReadByte()
	if err == nil {
		rest, _ := c.br.Peek(c.br.Buffered())
		c.t.Errorf("egret sent more after the response: %q", append([]byte{b}, rest...))
		return false
	}
	return !isTimeout(err)
}

// checkHead checks a header section egret wrote (a request to the next
// hop, or a response to a client): at most one framing field, a
// Connection field that names nothing the next hop would delete, and none
// of the fields gone.
func checkHead(t testing.TB, what, head string, gone ...string) {
	t.Helper()
	var cl, te int
	shown := clip([]byte(head))
	for _, line := range strings.Split(head, "\r\n")[1:] {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.ToLower(name) {
		case "content-length":
			cl++
		case "transfer-encoding":
			te++
		case "connection":
			for _, tok := range strings.Split(value, ",") {
				switch strings.ToLower(strings.TrimSpace(tok)) {
				case "", "close", "keep-alive", "upgrade":
				default:
					t.Errorf("%s: egret wrote Connection: %s; the next hop would delete %s: %s", what, value, tok, shown)
				}
			}
		}
		for _, g := range gone {
			if strings.EqualFold(name, g) {
				t.Errorf("%s: %s was named in Connection and reached the next hop: %s", what, g, shown)
			}
		}
	}
	if cl+te > 1 {
		t.Errorf("%s: %d Content-Length and %d Transfer-Encoding fields: %s", what, cl, te, shown)
	}
}

// hop is the next hop egret forwards to in a test: the origin itself, or
// a wirePeer playing an http upstream member.
type hop struct {
	name   string
	member bool
}

var hops = []hop{{"direct", false}, {"member", true}}

// Egret's credential for the member, and what it sends for it.
const (
	memberUser = "egret"
	memberPass = "member-pass"
)

var memberAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(memberUser+":"+memberPass))

// attackerAuth is the attacker's own Proxy-Authorization: hop-by-hop, it
// never reaches the next hop.
const attackerAuth = "Basic YXR0YWNrZXI6eA=="

// victimAuth is the victim's secret.
const victimAuth = "Bearer victim-secret"

// hopSetup starts a wirePeer as the next hop h and an egret that forwards
// origin.test to it; it returns them and the origin's host:port in URLs.
func hopSetup(t *testing.T, h hop, answer wireAnswer) (*wirePeer, *testProxy, string) {
	t.Helper()
	w := startWire(t, answer)
	pc := proxyConf{hosts: originHosts, timeouts: Timeouts{ResponseHeader: 10 * time.Second}}
	host := "origin.test:" + w.port
	if h.member {
		pc.members = []string{"http://" + memberUser + ":" + memberPass + "@" + w.addr}
		host = "origin.test:" + strconv.Itoa(18080) // the member answers for any origin
	}
	return w, startProxy(t, pc), host
}

// wantReq is a request the next hop must have received.
type wantReq struct {
	method, path, body string
	auth               string // Authorization
}

// checkReceived compares what the next hop received with want, in order,
// and checks each request egret wrote: framed by egret (the body's own
// length, or chunked), Host from the request target, no field of gone,
// and on a member egret's credential (never the client's).
func checkReceived(t *testing.T, w *wirePeer, h hop, host string, want []wantReq, gone ...string) {
	t.Helper()
	got, errs := w.requests()
	bad := len(errs) > 0 || len(got) != len(want)
	for i := 0; i < len(got) && i < len(want); i++ {
		g, wr := got[i], want[i]
		if g.method != wr.method || g.path != wr.path || g.body != wr.body || g.bodyErr != nil || g.header.Get("Authorization") != wr.auth {
			bad = true
		}
		target := wr.path
		if h.member {
			target = "http://" + host + wr.path
		}
		if g.target != target || g.host != host {
			t.Errorf("request %d went to %s with Host %s, want %s with Host %s", i+1, g.target, g.host, target, host)
		}
		if g.body != "" && !g.chunked && g.length != int64(len(g.body)) {
			t.Errorf("request %d: Content-Length %d for a body of %d bytes", i+1, g.length, len(g.body))
		}
		checkHead(t, fmt.Sprintf("request %d", i+1), g.head, gone...)
		pa := g.header.Values("Proxy-Authorization")
		switch {
		case h.member && (len(pa) != 1 || pa[0] != memberAuth):
			t.Errorf("request %d reached the member with Proxy-Authorization %q, want egret's own", i+1, pa)
		case !h.member && len(pa) > 0:
			t.Errorf("request %d reached the origin with Proxy-Authorization %q", i+1, pa)
		}
	}
	for _, g := range got {
		if strings.Contains(g.target, "smuggled") {
			bad = true
		}
	}
	if bad {
		var wl strings.Builder
		for _, wr := range want {
			fmt.Fprintf(&wl, "  %s %s body %s auth %q\n", wr.method, wr.path, clip([]byte(wr.body)), wr.auth)
		}
		t.Errorf("the next hop received:\n%swant exactly:\n%s", w.dump(), wl.String())
	}
}

// Connection fields that name framing and routing fields, as an attacker
// writes them. gone are the fields named that must not reach the next hop;
// host, when set, is the attacker's Host field (the request target's
// otherwise).
type connVariant struct {
	name, lines string
	gone        []string
	host        string
}

// hostField is the Host field v's request carries to target.
func (v connVariant) hostField(target string) string {
	if v.host != "" {
		return "Host: " + v.host + "\r\n"
	}
	return "Host: " + target + "\r\n"
}

var requestConnVariants = []connVariant{
	{"content-length", "Connection: Content-Length\r\n", nil, ""},
	{"keep-alive-content-length", "Connection: keep-alive, Content-Length\r\n", nil, ""},
	{"upper-case", "Connection: CONTENT-LENGTH\r\n", nil, ""},
	{"spaces", "Connection:    content-length  ,\r\n", nil, ""},
	{"two-lines", "Connection: keep-alive\r\nConnection: Content-Length\r\n", nil, ""},
	{"with-end-to-end-field", "Connection: Content-Length, X-Hop\r\nX-Hop: dropped\r\n", []string{"X-Hop"}, ""},
	{"transfer-encoding", "Connection: Transfer-Encoding\r\n", nil, ""},
	{"host", "Connection: Host\r\n", nil, ""},
	{"host-elsewhere", "Connection: Host, Content-Length\r\n", nil, "forbidden.test"},
	{"te", "Connection: TE, Content-Length\r\nTE: trailers\r\n", nil, ""},
	{"trailer", "Connection: Trailer\r\nTrailer: X-T\r\n", nil, ""},
	{"upgrade", "Connection: Upgrade, Content-Length\r\nUpgrade: websocket\r\n", []string{"Upgrade"}, ""},
	{"keep-alive-field", "Connection: Keep-Alive, Content-Length\r\nKeep-Alive: timeout=5\r\n", []string{"Keep-Alive"}, ""},
	{"proxy-authorization", "Connection: Proxy-Authorization, Content-Length\r\n", nil, ""},
	{"everything", "Connection: Content-Length, Transfer-Encoding, Host, TE, Trailer, Upgrade, Keep-Alive, Proxy-Authorization, Proxy-Connection, X-Hop\r\nKeep-Alive: 1\r\nX-Hop: dropped\r\n",
		[]string{"Keep-Alive", "X-Hop", "Proxy-Connection"}, ""},
}

// smuggledPayload is a request body that is itself a request to host:
// complete, open-ended (the next request's header would become its own),
// or larger than egret's buffers (so the body is copied, not sent with the
// header).
func smuggledPayload(kind, host string) string {
	req := "GET http://" + host + "/smuggled HTTP/1.1\r\nHost: " + host + "\r\n"
	switch kind {
	case "complete":
		return req + "\r\n"
	case "open":
		// No Host of its own: the next request's header, Host,
		// credentials and all, completes it.
		return "GET http://" + host + "/smuggled HTTP/1.1\r\nX-Swallow: "
	case "large":
		return req + "X-Pad: " + strings.Repeat("p", 3*http1.BufSize) + "\r\n\r\n"
	}
	panic(kind)
}

var payloadKinds = []string{"complete", "open", "large"}

// chunk frames body as one chunk and the last chunk.
func chunk(body string) string {
	return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
}

// framed returns the framing header lines and the framed body.
func framed(framing, body string) (string, string) {
	if framing == "chunked" {
		return "Transfer-Encoding: chunked\r\n", chunk(body)
	}
	return "Content-Length: " + strconv.Itoa(len(body)) + "\r\n", body
}

// victimRequest is the victim's request: its own answer, its secret.
func victimRequest(host string) string {
	return "GET http://" + host + "/victim HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: " + victimAuth + "\r\n\r\n"
}

// wantAnswer checks that a response is the next hop's answer to method path.
func wantAnswer(t testing.TB, who string, resp *http.Response, body, method, path string) bool {
	t.Helper()
	if resp.StatusCode != 200 || body != answerBody(method, path) || resp.Header.Get("X-Answer-To") != method+" "+path {
		t.Errorf("%s got %d %q (X-Answer-To %q), want the answer to %s %s", who, resp.StatusCode, body, resp.Header.Get("X-Answer-To"), method, path)
		return false
	}
	return true
}

// TestSmuggleRequestConnection: an attacker's POST whose Connection field
// names its framing (or routing) fields, with a body that is a request,
// followed by a victim's request on another connection. The origin (or
// member) must receive exactly the POST, its body intact, and the
// victim's request, which gets its own answer; on a member both carry
// egret's credential and nothing else does.
func TestSmuggleRequestConnection(t *testing.T) {
	for _, h := range hops {
		t.Run(h.name, func(t *testing.T) {
			for _, v := range requestConnVariants {
				for _, framing := range []string{"length", "chunked"} {
					for _, kind := range payloadKinds {
						t.Run(v.name+"/"+framing+"/"+kind, func(t *testing.T) {
							w, p, host := hopSetup(t, h, nil)
							payload := smuggledPayload(kind, host)
							fh, fb := framed(framing, payload)
							attacker := dialWire(t, p.Addr)
							attacker.send("POST http://" + host + "/a HTTP/1.1\r\n" + v.hostField(host) + v.lines +
								"Proxy-Authorization: " + attackerAuth + "\r\n" + fh + "\r\n" + fb)
							resp, head, body := attacker.read("POST")
							wantAnswer(t, "the attacker", resp, body, "POST", "/a")
							checkHead(t, "the answer to the attacker", head)
							victim := dialWire(t, p.Addr)
							victim.send(victimRequest(host))
							resp, _, body = victim.read("GET")
							wantAnswer(t, "the victim", resp, body, "GET", "/victim")
							w.settle(t, p)
							checkReceived(t, w, h, host, []wantReq{
								{method: "POST", path: "/a", body: payload},
								{method: "GET", path: "/victim", auth: victimAuth},
							}, v.gone...)
							if strings.Contains(p.Log.String(), "/smuggled") {
								t.Errorf("egret logged a smuggled request:\n%s", p.Log.String())
							}
						})
					}
				}
			}
		})
	}
}

// fakeResponse is a response hidden in a response body: a client that
// lost the framing would take it for the answer to its next request.
const fakeResponse = "HTTP/1.1 200 OK\r\nX-Answer-To: GET /next\r\nContent-Length: 8\r\n\r\nhijacked"

// TestSmuggleResponseConnection: the origin (or member) answers with a
// Connection field naming the response's framing, and a body that holds a
// fake response. The client, on a kept connection, must read exactly that
// body, framed by egret, and then the real answer to its next request.
func TestSmuggleResponseConnection(t *testing.T) {
	large := strings.Repeat("l", 40<<10) + fakeResponse
	for _, tc := range []struct {
		name, lines, body string
		chunked           bool
		gone              []string
	}{
		{"content-length", "Connection: Content-Length\r\n", fakeResponse, false, nil},
		{"keep-alive-content-length", "Connection: keep-alive, Content-Length\r\n", fakeResponse, false, nil},
		{"upper-case", "Connection: CONTENT-LENGTH\r\n", fakeResponse, false, nil},
		{"spaces", "Connection:   content-length ,\r\n", fakeResponse, false, nil},
		{"two-lines", "Connection: keep-alive\r\nConnection: Content-Length\r\n", fakeResponse, false, nil},
		{"with-end-to-end-field", "Connection: Content-Length, X-Hop\r\nX-Hop: dropped\r\n", fakeResponse, false, []string{"X-Hop"}},
		{"everything", "Connection: Content-Length, Transfer-Encoding, Trailer, Keep-Alive, Upgrade, X-Hop\r\nKeep-Alive: timeout=1\r\nX-Hop: dropped\r\n",
			fakeResponse, false, []string{"Keep-Alive", "X-Hop"}},
		{"large", "Connection: Content-Length\r\n", large, false, nil},
		{"transfer-encoding", "Connection: Transfer-Encoding\r\n", fakeResponse, true, nil},
		{"transfer-encoding-content-length", "Connection: Transfer-Encoding, Content-Length\r\n", fakeResponse, true, nil},
		{"transfer-encoding-large", "Connection: transfer-encoding\r\n", large, true, nil},
	} {
		for _, h := range hops {
			t.Run(tc.name+"/"+h.name, func(t *testing.T) {
				evil := func(r *wireReq, c net.Conn, br *bufio.Reader) bool {
					if r.path != "/evil" {
						return echoAnswer(r, c, br)
					}
					var b strings.Builder
					b.WriteString("HTTP/1.1 200 OK\r\n" + tc.lines)
					if tc.chunked {
						b.WriteString("Transfer-Encoding: chunked\r\n\r\n" + chunk(tc.body))
					} else {
						fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(tc.body), tc.body)
					}
					_, err := io.WriteString(c, b.String())
					return err == nil
				}
				w, p, host := hopSetup(t, h, evil)
				c := dialWire(t, p.Addr)
				c.send("GET http://" + host + "/evil HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
				resp, head, body := c.read("GET")
				if resp.StatusCode != 200 || body != tc.body {
					t.Errorf("the client got %d with a body of %d bytes, want 200 with the origin's %d:\n%s%.200q", resp.StatusCode, len(body), len(tc.body), head, body)
				}
				checkHead(t, "the response", head, tc.gone...)
				c.send("GET http://" + host + "/next HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
				resp, _, body = c.read("GET")
				wantAnswer(t, "the next request", resp, body, "GET", "/next")
				victim := dialWire(t, p.Addr)
				victim.send(victimRequest(host))
				resp, _, body = victim.read("GET")
				wantAnswer(t, "the victim", resp, body, "GET", "/victim")
				w.settle(t, p)
				checkReceived(t, w, h, host, []wantReq{
					{method: "GET", path: "/evil"},
					{method: "GET", path: "/next"},
					{method: "GET", path: "/victim", auth: victimAuth},
				})
			})
		}
	}
}

// TestSmugglePipelined: two and three requests in one write, with and
// without bodies, smuggling payloads among them. Each gets its own answer,
// in order, and the next hop receives exactly them.
func TestSmugglePipelined(t *testing.T) {
	type preq struct {
		method, path, lines, framing, body string
	}
	for _, tc := range []struct {
		name string
		reqs []preq
	}{
		{"two-gets", []preq{{method: "GET", path: "/p1"}, {method: "GET", path: "/p2"}}},
		{"three-with-bodies", []preq{{"POST", "/p1", "", "length", "hello"}, {method: "GET", path: "/p2"}, {"PUT", "/p3", "", "chunked", "abc"}}},
		{"smuggler-first", []preq{{"POST", "/p1", "Connection: Content-Length\r\n", "length", "complete"}, {method: "GET", path: "/p2"}}},
		{"smuggler-middle", []preq{{method: "GET", path: "/p1"}, {"POST", "/p2", "Connection: keep-alive, content-length\r\n", "length", "open"}, {method: "GET", path: "/p3"}}},
		{"smuggler-last", []preq{{method: "HEAD", path: "/p1"}, {method: "GET", path: "/p2"}, {"POST", "/p3", "Connection: CONTENT-LENGTH\r\n", "length", "complete"}}},
		{"smuggler-chunked", []preq{{"POST", "/p1", "Connection: Transfer-Encoding\r\n", "chunked", "complete"}, {method: "GET", path: "/p2"}, {method: "GET", path: "/p3"}}},
		{"smuggler-large", []preq{{"POST", "/p1", "Connection: Content-Length\r\n", "length", "large"}, {method: "GET", path: "/p2"}}},
		{"three-smugglers", []preq{
			{"POST", "/p1", "Connection: Content-Length\r\n", "length", "complete"},
			{"PUT", "/p2", "Connection: keep-alive\r\nConnection: Content-Length\r\n", "length", "open"},
			{"POST", "/p3", "Connection: Content-Length, Transfer-Encoding\r\n", "chunked", "complete"},
		}},
	} {
		for _, h := range hops {
			t.Run(tc.name+"/"+h.name, func(t *testing.T) {
				w, p, host := hopSetup(t, h, nil)
				var all strings.Builder
				var want []wantReq
				for _, r := range tc.reqs {
					body := r.body
					switch body {
					case "complete", "open", "large":
						body = smuggledPayload(body, host)
					}
					fmt.Fprintf(&all, "%s http://%s%s HTTP/1.1\r\nHost: %s\r\n%s", r.method, host, r.path, host, r.lines)
					if r.framing != "" {
						fh, fb := framed(r.framing, body)
						all.WriteString(fh + "\r\n" + fb)
					} else {
						all.WriteString("\r\n")
					}
					want = append(want, wantReq{method: r.method, path: r.path, body: body})
				}
				c := dialWire(t, p.Addr)
				c.send(all.String())
				for _, r := range tc.reqs {
					resp, head, body := c.read(r.method)
					if r.method == http.MethodHead {
						body = answerBody(r.method, r.path)
					}
					wantAnswer(t, "pipelined "+r.method+" "+r.path, resp, body, r.method, r.path)
					checkHead(t, "the answer to "+r.path, head)
				}
				victim := dialWire(t, p.Addr)
				victim.send(victimRequest(host))
				resp, _, body := victim.read("GET")
				wantAnswer(t, "the victim", resp, body, "GET", "/victim")
				w.settle(t, p)
				checkReceived(t, w, h, host, append(want, wantReq{method: "GET", path: "/victim", auth: victimAuth}))
			})
		}
	}
}

// TestSmuggleInterimAndUpgrade: 100-continue, 101 Switching Protocols and
// 103 Early Hints beside Connection fields that name framing fields.
func TestSmuggleInterimAndUpgrade(t *testing.T) {
	for _, h := range hops {
		t.Run("expect-100-continue/"+h.name, func(t *testing.T) {
			// An origin that sends 100 Continue to every expectation; its
			// 100 names a Content-Length of its own, which is not a body.
			w, p, host := hopSetup(t, h, nil)
			w.interim = func(*wireReq) string {
				return "HTTP/1.1 100 Continue\r\nConnection: Content-Length, keep-alive\r\nContent-Length: 40\r\n\r\n"
			}
			payload := smuggledPayload("complete", host)
			c := dialWire(t, p.Addr)
			c.send("POST http://" + host + "/a HTTP/1.1\r\nHost: " + host + "\r\nConnection: Content-Length\r\nExpect: 100-continue\r\nContent-Length: " +
				strconv.Itoa(len(payload)) + "\r\n\r\n")
			resp, head, _ := c.read("POST")
			if resp.StatusCode != http.StatusContinue {
				t.Fatalf("the client got %d before sending its body, want 100 Continue:\n%s", resp.StatusCode, head)
			}
			c.send(payload)
			resp, _, body := c.read("POST")
			wantAnswer(t, "the client", resp, body, "POST", "/a")
			victim := dialWire(t, p.Addr)
			victim.send(victimRequest(host))
			resp, _, body = victim.read("GET")
			wantAnswer(t, "the victim", resp, body, "GET", "/victim")
			w.settle(t, p)
			checkReceived(t, w, h, host, []wantReq{
				{method: "POST", path: "/a", body: payload},
				{method: "GET", path: "/victim", auth: victimAuth},
			})
		})
		t.Run("early-hints/"+h.name, func(t *testing.T) {
			hints := func(r *wireReq, c net.Conn, br *bufio.Reader) bool {
				if r.path != "/hints" {
					return echoAnswer(r, c, br)
				}
				_, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\nConnection: Content-Length, Link\r\nContent-Length: 7\r\n\r\n"+
					"HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: "+strconv.Itoa(len(fakeResponse))+"\r\n\r\n"+fakeResponse)
				return err == nil
			}
			w, p, host := hopSetup(t, h, hints)
			c := dialWire(t, p.Addr)
			c.send("GET http://" + host + "/hints HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
			resp, head, _ := c.read("GET")
			if resp.StatusCode != http.StatusEarlyHints {
				t.Fatalf("first response %d, want 103:\n%s", resp.StatusCode, head)
			}
			checkHead(t, "the 103", head)
			resp, head, body := c.read("GET")
			if resp.StatusCode != 200 || body != fakeResponse {
				t.Errorf("final response %d %q, want 200 %q:\n%s", resp.StatusCode, body, fakeResponse, head)
			}
			checkHead(t, "the final response", head)
			c.send("GET http://" + host + "/next HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
			resp, _, body = c.read("GET")
			wantAnswer(t, "the next request", resp, body, "GET", "/next")
			w.settle(t, p)
			checkReceived(t, w, h, host, []wantReq{{method: "GET", path: "/hints"}, {method: "GET", path: "/next"}})
		})
	}
	t.Run("switching-protocols", func(t *testing.T) {
		// An upgrade whose Connection names Content-Length too; the 101
		// does as well, with a Content-Length that is not a body: after it
		// every byte is the new protocol's, both ways, and the connection
		// never returns to the pool.
		var upgraded wireReq
		ws := func(r *wireReq, c net.Conn, br *bufio.Reader) bool {
			if r.path != "/ws" {
				return echoAnswer(r, c, br)
			}
			upgraded = *r
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade, Content-Length\r\nUpgrade: websocket\r\nContent-Length: 5\r\n\r\n")
			buf := make([]byte, 64)
			for {
				n, err := br.Read(buf)
				if n > 0 {
					io.WriteString(c, "echo:"+string(buf[:n]))
				}
				if err != nil {
					return false
				}
			}
		}
		w, p, host := hopSetup(t, hop{name: "direct"}, ws)
		c := dialWire(t, p.Addr)
		c.send("GET http://" + host + "/ws HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade, Content-Length\r\nUpgrade: websocket\r\nContent-Length: 0\r\n\r\n")
		resp, head, _ := c.read("GET")
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("got %d, want 101:\n%s", resp.StatusCode, head)
		}
		// A 101 has no body: a Content-Length on it, or a Connection
		// field naming one, is not egret's to pass on.
		checkHead(t, "the 101", head, "Content-Length")
		c.send("ping")
		got := make([]byte, len("echo:ping"))
		if _, err := io.ReadFull(c.br, got); err != nil || string(got) != "echo:ping" {
			t.Errorf("through the upgraded connection: %q, %v; want %q", got, err, "echo:ping")
		}
		c.c.Close()
		victim := dialWire(t, p.Addr)
		victim.send(victimRequest(host))
		resp, _, body := victim.read("GET")
		wantAnswer(t, "the victim", resp, body, "GET", "/victim")
		w.settle(t, p)
		checkReceived(t, w, hop{name: "direct"}, host, []wantReq{{method: "GET", path: "/ws"}, {method: "GET", path: "/victim", auth: victimAuth}})
		if !httpguts.HeaderValuesContainsToken(upgraded.header["Connection"], "upgrade") || upgraded.header.Get("Upgrade") != "websocket" {
			t.Errorf("the upgrade reached the origin as:\n%s", upgraded.head)
		}
		got2, _ := w.requests()
		if len(got2) == 2 && got2[0].conn == got2[1].conn {
			t.Errorf("the victim's request went into the upgraded connection")
		}
	})
	for _, tc := range []struct {
		name, lines string
		answer101   bool
	}{
		// A request with a body is not switched over: the Upgrade is
		// dropped, and a 101 the origin sends anyway is refused (502),
		// its connection closed.
		{"upgrade-with-body", "Connection: Upgrade\r\nUpgrade: websocket\r\n", false},
		{"upgrade-content-length-with-body", "Connection: Upgrade, Content-Length\r\nUpgrade: websocket\r\n", false},
		{"unasked-101", "Connection: Content-Length\r\n", true},
		{"upgrade-with-body-101", "Connection: Upgrade, Content-Length\r\nUpgrade: websocket\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := func(r *wireReq, c net.Conn, br *bufio.Reader) bool {
				if r.path != "/up" || !tc.answer101 {
					return echoAnswer(r, c, br)
				}
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
				return false
			}
			w, p, host := hopSetup(t, hop{name: "direct"}, answer)
			payload := smuggledPayload("complete", host)
			c := dialWire(t, p.Addr)
			c.send("POST http://" + host + "/up HTTP/1.1\r\nHost: " + host + "\r\n" + tc.lines + "Content-Length: " + strconv.Itoa(len(payload)) + "\r\n\r\n" + payload)
			resp, head, body := c.read("POST")
			if tc.answer101 {
				wantProxyStatus(t, resp, body, http.StatusBadGateway, "http_protocol_error")
				if !c.closed() {
					t.Error("the client connection stayed open after a refused 101")
				}
			} else {
				wantAnswer(t, "the client", resp, body, "POST", "/up")
				checkHead(t, "the answer", head)
			}
			victim := dialWire(t, p.Addr)
			victim.send(victimRequest(host))
			resp, _, body = victim.read("GET")
			wantAnswer(t, "the victim", resp, body, "GET", "/victim")
			w.settle(t, p)
			checkReceived(t, w, hop{name: "direct"}, host, []wantReq{
				{method: "POST", path: "/up", body: payload},
				{method: "GET", path: "/victim", auth: victimAuth},
			}, "Upgrade")
		})
	}
}

// TestSmuggleRefused: requests egret refuses, and closes the connection
// after, with another request pipelined behind each (and behind some a
// Connection field naming the framing): nothing reaches the origin but the
// victim's request on its own connection.
func TestSmuggleRefused(t *testing.T) {
	big := strings.Repeat("b", DefaultMaxHeaderBytes+2*http1.HeaderSlack)
	for _, tc := range []struct {
		name, lines, body string
		code              int
		errType           string
	}{
		{"te-and-cl", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n", 400, "http_request_error"},
		{"te-and-cl-named", "Connection: Content-Length\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n", 400, "http_request_error"},
		{"cl-and-te-named-te", "Connection: keep-alive, Transfer-Encoding\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n", 400, "http_request_error"},
		{"two-content-lengths", "Content-Length: 5\r\nContent-Length: 6\r\n", "hello!", 400, "http_request_error"},
		{"two-content-lengths-named", "Connection: CONTENT-LENGTH\r\nContent-Length: 5\r\nContent-Length: 6\r\n", "hello!", 400, "http_request_error"},
		{"content-length-list", "Connection: Content-Length\r\nContent-Length: 5, 6\r\n", "hello!", 400, "http_request_error"},
		{"unsupported-transfer-coding", "Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n", 501, "http_request_error"},
		{"unsupported-transfer-coding-named", "Connection: Transfer-Encoding\r\nTransfer-Encoding: gzip\r\n", "0\r\n\r\n", 501, "http_request_error"},
		{"obs-fold-host", "Host: origin.test\r\n evil.test\r\n", "", 400, "http_request_error"},
		{"obs-fold-host-named", "Connection: Host\r\nHost: origin.test\r\n\tevil.test\r\n", "", 400, "http_request_error"},
		{"header-too-large", "X-Big: " + big + "\r\n", "", 431, "http_request_header_section_size"},
		{"header-too-large-named", "Connection: X-Big, Content-Length\r\nX-Big: " + big + "\r\n", "", 431, "http_request_header_section_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, p, host := hopSetup(t, hop{name: "direct"}, nil)
			hostLine := "Host: " + host + "\r\n"
			if strings.Contains(tc.lines, "Host:") {
				hostLine = ""
			}
			c := dialWire(t, p.Addr)
			c.send("POST http://" + host + "/refused HTTP/1.1\r\n" + hostLine + tc.lines + "\r\n" + tc.body +
				"GET http://" + host + "/after HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
			resp, _, body := c.read("POST")
			wantProxyStatus(t, resp, body, tc.code, tc.errType)
			if !c.closed() {
				t.Error("the connection stayed open after the refusal")
			}
			victim := dialWire(t, p.Addr)
			victim.send(victimRequest(host))
			resp, _, body = victim.read("GET")
			wantAnswer(t, "the victim", resp, body, "GET", "/victim")
			w.settle(t, p)
			checkReceived(t, w, hop{name: "direct"}, host, []wantReq{{method: "GET", path: "/victim", auth: victimAuth}})
		})
	}
}

package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/relay"
)

// established is the answer to a CONNECT whose tunnel is up.
const established = "HTTP/1.1 200 Connection established\r\n\r\n"

// serveConnect opens a tunnel for a CONNECT request: the connection
// becomes the tunnel's. After a refusal the connection may carry another
// request, as with any error answer.
func (cc *clientConn) serveConnect(req *http.Request) bool {
	s := cc.s
	ev := &event{kind: metrics.KindConnect, client: cc.remote, method: req.Method, dest: scrubHost(req.Host), start: time.Now()}
	refuse := func(e *proxystatus.Error) bool { return cc.fail(req, ev, e, false) }
	ctx, stop := watchClient(s.ctx, cc.c, cc.peek, nil)
	a, e := s.admit(ctx, ev, &target{hostport: req.Host, via: req.Header["Via"], tunnel: true})
	var sc *Conn
	var err error
	if e == nil {
		sc, err = s.open(ctx, ev, a)
	}
	if _, gone := stop(); gone {
		if sc != nil {
			sc.Close()
		}
		ev.err = clientGone(errClientLeft)
		s.finish(ev)
		return false
	}
	if e != nil {
		return refuse(e)
	}
	if err != nil {
		return refuse(proxystatus.From(err))
	}
	ev.status = http.StatusOK
	// Register the tunnel before the client can see the 200, so a drain
	// that starts right after counts it.
	t := relay.New(cc.c, sc.Conn)
	s.addTunnel(t, ev.kind)
	cc.handOff(ev)
	if _, err := io.WriteString(cc.c, established); err != nil {
		s.removeTunnel(t)
		cc.c.Close()
		sc.Close()
		ev.status = 0
		ev.err = clientGone(err)
		s.finish(ev)
		return false
	}
	s.start(ev, t, buffered(cc.br), sc)
	return false
}

// relay runs the tunnel between the client and the destination in the
// background and logs it when it ends.
func (s *Server) relay(ev *event, client net.Conn, clientPrefix []byte, sc *Conn) {
	t := relay.New(client, sc.Conn)
	s.addTunnel(t, ev.kind)
	s.start(ev, t, clientPrefix, sc)
}

// start starts a registered tunnel; when it ends it is unregistered, its
// limits are released and it is logged. The tunnel outlives the request:
// it keeps nothing of its context (an idle tunnel should cost as little
// memory as possible).
func (s *Server) start(ev *event, t *relay.Tunnel, clientPrefix []byte, sc *Conn) {
	t.Start(clientPrefix, sc.Prefix, func(res relay.Result) {
		sc.Release()
		ev.up, ev.down = res.Up, res.Down
		s.finish(ev)
		// Only now: a drain that sees no tunnel left may end the process,
		// and this tunnel's log line is written.
		s.removeTunnel(t)
	})
}

// buffered returns (a copy of) what br holds beyond the message already
// read: bytes the client sent for the tunnel along with its request.
func buffered(br *bufio.Reader) []byte {
	n := br.Buffered()
	if n == 0 {
		return nil
	}
	p := make([]byte, n)
	io.ReadFull(br, p)
	return p
}

// viaHas reports whether a Via field value lists received-by name.
// Each element is "protocol received-by [comment]".
func viaHas(v, name string) bool {
	for v != "" {
		var el string
		el, v, _ = strings.Cut(v, ",")
		el = strings.TrimSpace(el)
		_, rest, ok := strings.Cut(el, " ")
		if !ok {
			continue
		}
		by, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if strings.EqualFold(by, name) {
			return true
		}
	}
	return false
}

// via is this proxy's Via element for a message of protocol
// HTTP/major.minor.
func (s *Server) via(major, minor int) string {
	switch {
	case major == 1 && minor == 1:
		return s.via11
	case major == 1 && minor == 0:
		return s.via10
	}
	return strconv.Itoa(major) + "." + strconv.Itoa(minor) + " " + s.opts.Via + " (egret)"
}

// isHopByHop reports whether a (canonical) field name is hop-by-hop
// (RFC 9110 section 7.6.1, and the fields proxies have used).
func isHopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// isFraming reports whether a (canonical) field name frames or routes a
// message. egret writes these itself on every hop, from the message it
// forwards — Host from the request target, Content-Length and
// Transfer-Encoding from the body it sends — so no header edit, such as a
// Connection token naming one of them, can change how the next hop reads
// the message (RFC 9112 section 6.3; request smuggling).
func isFraming(k string) bool {
	return k == "Content-Length" || k == "Transfer-Encoding" || k == "Host"
}

// removeHopByHop deletes the hop-by-hop fields of h (the fixed ones and
// those the Connection field names) and the framing fields, which the
// writer of the next hop's message adds itself (see isFraming).
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			tok = strings.TrimSpace(tok)
			switch {
			case tok == "", strings.EqualFold(tok, "close"), strings.EqualFold(tok, "keep-alive"), strings.EqualFold(tok, "upgrade"):
				// options, or fields deleted below anyway
			default:
				delete(h, http.CanonicalHeaderKey(tok))
			}
		}
	}
	for k := range h {
		if isHopByHop(k) || isFraming(k) {
			delete(h, k)
		}
	}
}

// printable reports whether s is printable ASCII (an Upgrade protocol).
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// statusText is the status code and reason phrase to pass on for resp:
// the origin's own, unless it holds characters that have no place there.
func statusText(resp *http.Response) string {
	st := resp.Status
	if len(st) > 4 && st[3] == ' ' && httpguts.ValidHeaderFieldValue(st) {
		return st
	}
	return strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
}

// date caches the Date value of the current second.
type dateCache struct {
	sec int64
	val []byte
}

var lastDate atomic.Pointer[dateCache]

// appendDate appends the current time as an HTTP date.
func appendDate(b []byte) []byte {
	now := time.Now()
	if d := lastDate.Load(); d != nil && d.sec == now.Unix() {
		return append(b, d.val...)
	}
	d := &dateCache{sec: now.Unix(), val: now.UTC().AppendFormat(nil, http.TimeFormat)}
	lastDate.Store(d)
	return append(b, d.val...)
}

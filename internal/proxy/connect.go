package proxy

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/relay"
)

// established is the answer to a CONNECT whose tunnel is up.
const established = "HTTP/1.1 200 Connection established\r\n\r\n"

// serveConnect opens a tunnel for a CONNECT request through the shared
// tail: the connection becomes the tunnel's. After a refusal the
// connection may carry another request, as with any error answer.
func (cc *clientConn) serveConnect(req *http.Request) bool {
	ev := &event{kind: metrics.KindConnect, client: cc.remote, method: req.Method, dest: scrubHost(req.Host), start: time.Now()}
	ctx, stop := cc.watchClient(nil)
	side := &cc.side
	*side = connectSide{cc: cc, req: req}
	cc.s.tunnel(ctx, ev, &target{hostport: req.Host, via: req.Header["Via"], tunnel: true, auth: proxyAuth(req.Header)},
		cc.c, stop, side, tunnelOpts{sni: true, inline: &cc.relay})
	return side.keep
}

// connectSide is a CONNECT's part in the tail: HTTP answers.
type connectSide struct {
	cc   *clientConn
	req  *http.Request
	keep bool // the connection may carry another request (after a refusal)
}

func (cs *connectSide) refuse(ev *event, e *proxystatus.Error, _ error) {
	cs.keep = cs.cc.fail(cs.req, ev, e, false)
}

func (cs *connectSide) hand(sc *Conn) { cs.cc.handOff(sc) }

func (cs *connectSide) established([]byte) ([]byte, *proxystatus.Error) {
	if _, err := io.WriteString(cs.cc.c, established); err != nil {
		return nil, clientGone(err)
	}
	return http1.Buffered(cs.cc.r.Buf()), nil
}

// start starts a registered tunnel; when it ends it is unregistered, its
// limits are released and it is logged. The tunnel outlives the request:
// it keeps nothing of its context (an idle tunnel should cost as little
// memory as possible). With inline, the client's direction is left in
// *inline for the caller's goroutine to run (relay.StartInline).
func (s *Server) start(ev *event, t *relay.Tunnel, clientPrefix []byte, sc *Conn, inline *func()) {
	done := func(res relay.Result) {
		sc.Release()
		ev.up, ev.down = res.Up, res.Down
		s.finish(ev)
		// Only now: a drain that sees no tunnel left may end the process,
		// and this tunnel's log line is written.
		s.removeTunnel(t)
	}
	t.OnPanic = s.onPanic
	if inline != nil {
		*inline = t.StartInline(clientPrefix, sc.Prefix, done)
		return
	}
	t.Start(clientPrefix, sc.Prefix, done)
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

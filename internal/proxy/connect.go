package proxy

import (
	"io"
	"net"
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

// serveConnect opens a tunnel for a CONNECT request: the connection
// becomes the tunnel's. After a refusal the connection may carry another
// request, as with any error answer.
func (cc *clientConn) serveConnect(req *http.Request) bool {
	s := cc.s
	ev := &event{kind: metrics.KindConnect, client: cc.remote, method: req.Method, dest: scrubHost(req.Host), start: time.Now()}
	refuse := func(e *proxystatus.Error) bool { return cc.fail(req, ev, e, false) }
	ctx, stop := cc.watchClient(nil)
	a, e := s.admit(ctx, ev, &target{hostport: req.Host, via: req.Header["Via"], tunnel: true, auth: proxyAuth(req.Header)})
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
	cc.handOff(sc)
	if _, err := io.WriteString(cc.c, established); err != nil {
		s.removeTunnel(t)
		cc.c.Close()
		sc.Close()
		ev.status = 0
		ev.err = clientGone(err)
		s.finish(ev)
		return false
	}
	early := http1.Buffered(cc.r.Buf())
	if s.opts.Workloads != nil {
		// The SNI check reads the ClientHello the client sends once it has
		// its 200, before anything is relayed.
		var e *proxystatus.Error
		if early, e = s.checkSNI(ev, a, cc.c, early); e != nil {
			s.removeTunnel(t)
			cc.c.Close()
			sc.Close()
			ev.err = e
			ev.status = e.Code()
			s.finish(ev)
			return false
		}
	}
	if site := s.interceptSite(ev, a); site != nil {
		s.intercept(ev, t, cc.c, early, sc, a, site)
		return false
	}
	s.start(ev, t, early, sc)
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

package proxy

import (
	"net/http"
	"strconv"
	"time"

	"egret.io/egret/internal/metrics"
)

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

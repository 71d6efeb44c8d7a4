package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/relay"
	"egret.io/egret/internal/route"
)

// ServeHTTP handles one request from an explicit proxy client: CONNECT
// opens a tunnel, an absolute-URI request is forwarded, anything else is
// not a proxy request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		s.serveConnect(w, r)
	case r.URL.IsAbs() && r.URL.Host != "":
		s.serveForward(w, r)
	default:
		ev := &event{kind: metrics.KindHTTP, client: r.RemoteAddr, method: r.Method, dest: r.Host, start: time.Now()}
		s.fail(w, r.Context(), ev, &proxystatus.Error{Type: proxystatus.HTTPRequestError,
			Detail: "egret is a forward proxy: send absolute-URI requests (GET http://host/path) or CONNECT host:port"})
	}
}

// fail answers with e and logs the event.
func (s *Server) fail(w http.ResponseWriter, ctx context.Context, ev *event, e *proxystatus.Error) {
	ev.err = e
	ev.status = e.Code()
	proxystatus.Write(w, e)
	s.finish(ctx, ev)
}

func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ev := &event{kind: metrics.KindConnect, client: r.RemoteAddr, method: r.Method, dest: r.Host, start: time.Now()}
	if e := s.admitClient(ev); e != nil {
		s.fail(w, ctx, ev, e)
		return
	}
	dest, err := route.ParseDest(r.Host, 0)
	if err != nil {
		s.fail(w, ctx, ev, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "CONNECT target: " + err.Error()})
		return
	}
	ev.dest = dest.String()
	if s.loop(r) {
		s.fail(w, ctx, ev, &proxystatus.Error{Type: proxystatus.ProxyLoopDetected, Detail: "this request has already passed through " + s.opts.Via})
		return
	}
	st := s.state.Load()
	ev.dec, ev.decided = s.Route(ctx, st, dest), true
	if ev.dec.Action == route.Deny {
		s.fail(w, ctx, ev, denied(dest, ev.dec))
		return
	}
	sc, err := s.Dial(ctx, st, dest, ev.dec)
	if err != nil {
		s.fail(w, ctx, ev, proxystatus.From(err))
		return
	}
	ev.connect = sc.Connect
	if sc.Member != nil {
		ev.member = sc.Member.Name
	}
	if s.m != nil {
		s.m.Duration.WithLabelValues(ev.kind, ev.dec.Action.String()).Observe(time.Since(ev.start).Seconds())
	}
	// Once hijacked, http.Server.Shutdown no longer waits for this
	// connection: count it until relay has registered its tunnel.
	s.raw.hijacking.Add(1)
	defer s.raw.hijacking.Add(-1)
	cc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		sc.Close()
		s.fail(w, ctx, ev, &proxystatus.Error{Type: proxystatus.ProxyInternalError, Detail: "take over the client connection", Err: err})
		return
	}
	cc.SetDeadline(time.Time{})
	ev.status = http.StatusOK
	// Register the tunnel before the client can see the 200, so a drain
	// that starts right after counts it.
	t := relay.New(cc, sc.Conn)
	s.addTunnel(t, ev.kind)
	if _, err := io.WriteString(cc, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		s.removeTunnel(t)
		cc.Close()
		sc.Close()
		ev.status = 0
		s.finish(context.WithoutCancel(ctx), ev)
		return
	}
	s.start(ev, t, buffered(brw.Reader), sc)
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
		s.finish(context.Background(), ev)
		// Only now: a drain that sees no tunnel left may end the process,
		// and this tunnel's log line is written.
		s.removeTunnel(t)
	})
}

// buffered returns (a copy of) what the client sent after its request that
// the HTTP server already read.
func buffered(br *bufio.Reader) []byte {
	n := br.Buffered()
	if n == 0 {
		return nil
	}
	p := make([]byte, n)
	io.ReadFull(br, p)
	return p
}

// loop reports whether r already passed through this proxy.
func (s *Server) loop(r *http.Request) bool {
	for _, v := range r.Header.Values("Via") {
		if viaHas(v, s.opts.Via) {
			return true
		}
	}
	return false
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

// viaValue is this proxy's Via element for a message of protocol proto.
func (s *Server) viaValue(major, minor int) string {
	if major == 1 && minor == 1 {
		return "1.1 " + s.opts.Via + " (egret)"
	}
	return fmt.Sprintf("%d.%d %s (egret)", major, minor, s.opts.Via)
}

// isClientGone reports whether err only says the client went away.
func isClientGone(ctx context.Context, err error) bool {
	return errors.Is(err, context.Canceled) && ctx.Err() != nil
}

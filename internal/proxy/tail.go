package proxy

import (
	"context"
	"net"

	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/relay"
)

// The shared tail of the tunnel listeners — CONNECT, transparent, SOCKS5.
// Each listener parses its own protocol into a target and hands it here
// with its side (tunnelSide): the tail admits the target (admit), dials
// what admission approved while the client is watched (open, through the
// transport), and then registers, answers, checks and relays the tunnel
// in one order for all:
//
//	admit → open → (client gone?) → refusal or:
//	register → hand over → answer → SNI check → intercept or relay
//
// A listener's protocol shows only in its side: how a refusal and the
// established tunnel are answered, and who holds the client's slots.

// tunnelSide is a listener's part in the tail.
type tunnelSide interface {
	// refuse answers e (admission's refusal, or the dial's failure cause)
	// and logs ev: the tail ends there.
	refuse(ev *event, e *proxystatus.Error, cause error)
	// hand gives sc the client connection's slots: the tunnel holds them
	// until it ends.
	hand(sc *Conn)
	// established tells the client its tunnel is up and returns the
	// bytes the client sent ahead (more: what the watch read), in order;
	// a client that cannot be told is the error to log.
	established(more []byte) ([]byte, *proxystatus.Error)
}

// tunnelOpts says which checks of the tail a listener's tunnels get.
type tunnelOpts struct {
	// sni runs the workload's SNI check on the client's first bytes
	// (CONNECT, SOCKS5; a transparent connection's own sniff was checked
	// before admission).
	sni bool
	// inline, if set, receives the relay of the client's direction
	// (relay.StartInline) instead of a goroutine of its own: the
	// listener's goroutine runs it once it has finished with the
	// connection (the explicit listener's worker).
	inline *func()
}

// tunnel is the tail for the target tg of client c: ctx is the client's,
// stop ends the watch of it begun before (its bytes read ahead, and
// whether it left). It reports whether the tunnel was established.
func (s *Server) tunnel(ctx context.Context, ev *event, tg *target, c net.Conn, stop func() ([]byte, bool), side tunnelSide, o tunnelOpts) bool {
	a, e := s.admit(ctx, ev, tg)
	var sc *Conn
	var err error
	if e == nil {
		sc, err = s.open(ctx, ev, a)
	}
	more, gone := stop()
	if gone {
		if sc != nil {
			sc.Close()
		}
		c.Close()
		ev.err, ev.status = clientGone(errClientLeft), 0
		s.finish(ev)
		return false
	}
	if e != nil {
		side.refuse(ev, e, e)
		return false
	}
	if err != nil {
		side.refuse(ev, proxystatus.From(err), err)
		return false
	}
	ev.status = 200
	// Register the tunnel before the client can see its answer, so a
	// drain that starts right after counts it.
	t := relay.New(c, sc.Conn)
	s.addTunnel(t, ev.kind)
	side.hand(sc)
	early, e := side.established(more)
	if e == nil && o.sni && s.opts.Workloads != nil {
		// The SNI check reads the ClientHello the client sends once it
		// has its answer, before anything is relayed.
		early, e = s.checkSNI(ev, a, c, early)
		if e != nil {
			ev.status = e.Code()
		}
	} else if e != nil {
		ev.status = 0
	}
	if e != nil {
		s.removeTunnel(t)
		c.Close()
		sc.Close()
		ev.err = e
		s.finish(ev)
		return false
	}
	// A tunnel to an interception site is the engine's on every
	// listener, so a site's credential and method/path rules hold on all.
	if site := s.interceptSite(ev, a); site != nil {
		s.intercept(ev, t, c, early, sc, a, site)
		return true
	}
	s.start(ev, t, early, sc, o.inline)
	return true
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

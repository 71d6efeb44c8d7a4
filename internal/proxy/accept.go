package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime/debug"
	"syscall"
	"time"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
)

// The accept loop every listener shares: accept → the client's connection
// slot (or its refusal) → the listener's serve, which parses its protocol
// and hands the request or tunnel to admission (admit.go).

// accept registers ln, then accepts connections and passes each to serve
// (which must not block) until Shutdown, when it returns
// http.ErrServerClosed. A client over its connection limit is refused at
// once (refuseConn); the others come with their connection slot (nil
// without a limit), which serve must release when the connection closes.
func (s *Server) accept(ln net.Listener, kind string, serve func(c net.Conn, slot func())) error {
	if !s.raw.add(ln) {
		ln.Close()
		return http.ErrServerClosed
	}
	s.NoteListener(ln.Addr())
	s.startReaper()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.raw.isClosed() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors, an aborted handshake...: back off
			// like net/http and keep serving.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			reason := "other"
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				reason = "too_many_open_files"
			}
			if s.m != nil {
				s.m.AcceptErrors.WithLabelValues(kind, reason).Inc()
			}
			s.log.Warn("accept failed; retrying", "listener", ln.Addr().String(), "error", err.Error(), "retry_in", delay.String())
			time.Sleep(delay)
			continue
		}
		delay = 0
		slot, e := s.admitConn(c)
		if e != nil {
			s.refuseConn(kind, c, e)
			continue
		}
		serve(c, slot)
	}
}

// admitConn takes the client's connection slot, or returns the refusal.
func (s *Server) admitConn(c net.Conn) (func(), *proxystatus.Error) {
	l := s.opts.Protection.ClientConns
	if l == nil {
		return nil, nil
	}
	key := "unknown"
	if ip, ok := clientIP(c.RemoteAddr().String()); ok {
		key = ip.String()
	}
	rel, err := l.Acquire(key)
	if err != nil {
		return nil, s.limitErr(err)
	}
	return rel, nil
}

// refuseConn turns away a connection that was refused before it was read
// from: an HTTP client gets the error as a response (it may read it before
// or after sending its request), the others are closed. The refusal is
// logged like any request.
func (s *Server) refuseConn(kind string, c net.Conn, e *proxystatus.Error) {
	ev := &event{kind: kind, client: c.RemoteAddr().String(), start: time.Now(), err: e, status: e.Code()}
	s.finish(ev)
	if kind != metrics.KindHTTP {
		c.Close()
		return
	}
	go func() {
		c.SetWriteDeadline(time.Now().Add(refuseLinger))
		if proxystatus.WriteRaw(c, e, true) == nil {
			lingerClose(c)
		}
		c.Close()
	}()
}

// Serve accepts HTTP proxy clients on ln until Shutdown. It returns
// http.ErrServerClosed after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.startConnSweeper()
	s.tr.StartSweeper(s.stop)
	return s.accept(ln, metrics.KindHTTP, func(c net.Conn, slot func()) {
		cc := &clientConn{s: s, c: c, slot: slot}
		cc.since.Store(time.Now().UnixNano())
		if !s.trackConn(cc) {
			c.Close()
			return
		}
		select {
		case s.handoff <- cc: // an idle worker takes it
		default:
			go s.worker(cc)
		}
	})
}

// serveRaw accepts connections on ln and runs handle for each in its own
// goroutine, until Shutdown. handle must hand the connection to s.relay or
// close it before returning. l holds the connection's client slot (and
// whatever handle adds before admission); a tunnel takes it over, and
// whatever it still holds when handle returns is released then. A panic in handle closes that connection and
// is logged; the process stays up.
func (s *Server) serveRaw(ln net.Listener, kind string, handle func(ctx context.Context, c net.Conn, ev *event, l *lease)) error {
	return s.accept(ln, kind, func(c net.Conn, slot func()) {
		ev := &event{kind: kind, client: c.RemoteAddr().String(), start: time.Now()}
		l := &lease{}
		l.hold(slot)
		ctx, cancel := context.WithCancel(s.ctx)
		if !s.raw.track(c, cancel) {
			cancel()
			c.Close()
			return
		}
		go func() {
			defer func() {
				l.end() // what no tunnel took over
				if r := recover(); r != nil {
					c.Close()
					s.panicked(panicConnection, c.RemoteAddr().String(), r, debug.Stack())
				}
				s.raw.untrack(c)
				cancel()
			}()
			handle(ctx, c, ev, l)
		}()
	})
}

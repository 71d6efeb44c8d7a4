package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/transport"
)

// The explicit listener's engine: one goroutine per client connection,
// reading requests with net/http's parser (http.ReadRequest: request line,
// header validation, Content-Length and Transfer-Encoding rules, chunked
// bodies) from a pooled bufio.Reader, and answering on a pooled
// bufio.Writer. CONNECT becomes a tunnel on the same connection; an
// absolute-URI request is forwarded (forward.go) over a pooled connection
// to the origin or upstream member (origin.go).

// newConnGrace is how long Shutdown leaves a new connection that has not
// sent a byte before it closes it (like net/http).
const newConnGrace = 5 * time.Second

// Client connection states, for Shutdown.
const (
	connNew    int32 = iota // accepted, nothing read yet
	connActive              // reading or serving a request
	connIdle                // waiting for the next request
	connDone                // closed, or handed to a tunnel
)

// clientConn is one connection of an explicit proxy client.
type clientConn struct {
	s      *Server
	c      net.Conn
	remote string
	r      http1.Reader // its requests
	bw     *bufio.Writer
	state  atomic.Int32
	since  atomic.Int64 // unix nanoseconds: accepted, or became idle
	served int          // requests read
	// handedOff is set when the connection became a tunnel: it is no
	// longer this goroutine's to close.
	handedOff bool
	// slot is the client's connection slot (limit.Clients), released when
	// the connection closes; nil without a limit.
	slot   func()
	x      exchange    // the forwarded request in progress (reused)
	side   connectSide // the CONNECT in progress's part in the tail (reused)
	meters meters      // the metrics its requests counted last
	// authKeys name the idle connections authenticated for this client
	// (through NTLM and Negotiate members), closed when it ends.
	authKeys []transport.Key
	// ctx is the connection's, derived from the server's: cancelled when
	// the connection ends, or by Shutdown when it cuts connections off.
	ctx    context.Context
	cancel context.CancelFunc
	w      connWatch // the watch of the client while a request waits
	// relay is the client's direction of the tunnel the connection
	// became (CONNECT), left for the worker to run once serve has
	// finished with the connection: one goroutine less per tunnel.
	relay func()
}

// maxIdleWorkers bounds the goroutines kept waiting for a connection.
const maxIdleWorkers = 64

// worker serves connections: cc, then the ones the accept loop hands it.
// Reusing the goroutine saves starting one per connection, and growing its
// stack again (dialling and parsing take more than a new goroutine has).
func (s *Server) worker(cc *clientConn) {
	for {
		cc.serve()
		if run := cc.relay; run != nil {
			cc.relay = nil
			run() // until the direction ends or parks
		}
		if s.idleWorkers.Add(1) > maxIdleWorkers {
			s.idleWorkers.Add(-1)
			return
		}
		select {
		case cc = <-s.handoff:
			s.idleWorkers.Add(-1)
		case <-s.stop:
			s.idleWorkers.Add(-1)
			return
		}
	}
}

// trackConn registers a client connection; false once Shutdown began.
func (s *Server) trackConn(cc *clientConn) bool {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	if s.draining.Load() {
		return false
	}
	s.conns[cc] = struct{}{}
	return true
}

func (s *Server) untrackConn(cc *clientConn) {
	s.connsMu.Lock()
	delete(s.conns, cc)
	s.connsMu.Unlock()
}

// activeConns returns the client connections Shutdown waits for: serving
// a request, or new and within their grace period. It closes the idle ones
// (and new ones past their grace) on the way.
func (s *Server) activeConns(now time.Time) int {
	var idle []*clientConn
	n := 0
	s.connsMu.Lock()
	for cc := range s.conns {
		switch st := cc.state.Load(); {
		case st == connIdle && cc.state.CompareAndSwap(connIdle, connDone):
			idle = append(idle, cc)
		case st == connNew && now.UnixNano()-cc.since.Load() > int64(newConnGrace) && cc.state.CompareAndSwap(connNew, connDone):
			idle = append(idle, cc)
		case st == connActive || st == connNew:
			n++
		}
	}
	s.connsMu.Unlock()
	for _, cc := range idle {
		cc.c.Close()
	}
	return n
}

// sweepConns closes the client connections that stayed silent too long:
// new ones (no byte yet) past the header timeout, idle keep-alive ones past
// the idle timeout. A periodic scan replaces a read deadline (a timer
// update) per request.
func (s *Server) sweepConns(now time.Time) {
	hdr, idle := int64(s.opts.Timeouts.HeaderRead), int64(s.opts.Timeouts.ClientIdle)
	var stale []*clientConn
	s.connsMu.Lock()
	for cc := range s.conns {
		age := now.UnixNano() - cc.since.Load()
		switch st := cc.state.Load(); {
		case st == connNew && hdr > 0 && age > hdr && cc.state.CompareAndSwap(connNew, connDone):
			stale = append(stale, cc)
		case st == connIdle && idle > 0 && age > idle && cc.state.CompareAndSwap(connIdle, connDone):
			stale = append(stale, cc)
		}
	}
	s.connsMu.Unlock()
	for _, cc := range stale {
		cc.c.Close()
	}
}

// startConnSweeper runs sweepConns at a quarter of the shorter timeout
// (between 5ms and a second) until Shutdown.
func (s *Server) startConnSweeper() {
	every := time.Duration(0)
	for _, d := range []time.Duration{s.opts.Timeouts.HeaderRead, s.opts.Timeouts.ClientIdle} {
		if d > 0 && (every == 0 || d/4 < every) {
			every = d / 4
		}
	}
	if every == 0 {
		return
	}
	every = min(max(every, 5*time.Millisecond), time.Second)
	s.sweepGo.Do(func() { go everyUntil(s.stop, every, s.sweepConns) })
}

// everyUntil calls f with the time every period until stop is closed.
func everyUntil(stop <-chan struct{}, period time.Duration, f func(now time.Time)) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			f(now)
		}
	}
}

// closeConns closes every client connection (Shutdown's deadline).
func (s *Server) closeConns() {
	s.connsMu.Lock()
	all := make([]*clientConn, 0, len(s.conns))
	for cc := range s.conns {
		all = append(all, cc)
	}
	s.connsMu.Unlock()
	for _, cc := range all {
		cc.c.Close()
	}
}

// peek waits for the client's next byte without taking it (clientWatch).
func (cc *clientConn) peekByte() error {
	_, err := cc.r.Buf().Peek(1)
	return err
}

// serve reads and answers requests until the connection ends or becomes a
// tunnel.
func (cc *clientConn) serve() {
	s := cc.s
	cc.remote = cc.c.RemoteAddr().String()
	cc.r.MaxHeaderBytes = s.opts.MaxHeaderBytes
	cc.r.Reset(cc.c)
	cc.bw = http1.GetWriter(cc.c)
	cc.ctx, cc.cancel = context.WithCancel(s.ctx)
	defer func() {
		if r := recover(); r != nil {
			s.panicked(panicConnection, cc.remote, r, debug.Stack())
		}
		if !cc.handedOff {
			cc.c.Close()
			if cc.slot != nil {
				cc.slot()
			}
		}
		cc.x.lease.end() // a request a panic cut short holds nothing on
		cc.cancel()
		cc.state.Store(connDone)
		cc.dropAuthConns()
		s.untrackConn(cc)
		cc.r.Release()
		http1.PutWriter(cc.bw)
	}()
	for {
		req, err := cc.readRequest()
		if err != nil {
			cc.requestError(req, err)
			return
		}
		if !cc.handle(req) {
			return
		}
		if s.draining.Load() {
			return
		}
	}
}

// requestError answers a request that could not be read (or was refused
// before routing) and logs it; a client that left or stayed silent gets
// nothing.
func (cc *clientConn) requestError(req *http.Request, err error) {
	var pe *proxystatus.Error
	if !errors.As(err, &pe) {
		return // the client went away, or the connection was closed
	}
	ev := event{kind: metrics.KindHTTP, client: cc.remote, start: time.Now(), err: pe, status: pe.Code()}
	if req != nil {
		ev.method = req.Method
	}
	cc.c.SetWriteDeadline(time.Now().Add(refuseLinger))
	if proxystatus.WriteRaw(cc.bw, pe, true) == nil && cc.bw.Flush() == nil {
		cc.s.finish(&ev)
		lingerClose(cc.c)
		return
	}
	cc.s.finish(&ev)
}

// readRequest waits for the next request and reads its header (http1's
// Reader does the reading and the checks), moving the connection between
// idle and active for Shutdown and the sweeper. Errors the client must be
// told about are *proxystatus.Error values; any other error means the
// connection is over without an answer.
func (cc *clientConn) readRequest() (*http.Request, error) {
	s := cc.s
	// A new or idle connection waits without a deadline: sweepConns
	// closes it if it stays silent too long.
	if cc.served > 0 && !cc.r.Pipelined() {
		cc.since.Store(time.Now().UnixNano())
		if !cc.state.CompareAndSwap(connActive, connIdle) {
			return nil, net.ErrClosed
		}
	}
	if err := cc.r.Start(); err != nil {
		return nil, err
	}
	switch st := cc.state.Load(); st {
	case connActive:
	case connNew, connIdle:
		if !cc.state.CompareAndSwap(st, connActive) {
			return nil, net.ErrClosed // Shutdown closed it meanwhile
		}
	default:
		return nil, net.ErrClosed
	}
	// The header timeout runs from the request's first byte (slowloris);
	// a header that arrived whole needs none.
	deadline := false
	if d := s.opts.Timeouts.HeaderRead; d > 0 && !cc.r.HeaderBuffered() {
		cc.c.SetReadDeadline(time.Now().Add(d))
		deadline = true
	}
	cc.served++
	req, err := cc.r.Read()
	if deadline && err == nil {
		cc.c.SetReadDeadline(time.Time{}) // bodies and tunnels have none
	}
	return req, err
}

// handle serves one request; it reports whether the connection may carry
// another.
func (cc *clientConn) handle(req *http.Request) bool {
	switch {
	case req.Method == http.MethodConnect:
		return cc.serveConnect(req)
	case req.URL.IsAbs() && req.URL.Host != "":
		return cc.forward(req)
	}
	ev := event{kind: metrics.KindHTTP, client: cc.remote, method: req.Method, dest: req.Host, start: time.Now()}
	return cc.fail(req, &ev, &proxystatus.Error{Type: proxystatus.HTTPRequestError,
		Detail: "egret is a forward proxy: send absolute-URI requests (GET http://host/path) or CONNECT host:port"}, false)
}

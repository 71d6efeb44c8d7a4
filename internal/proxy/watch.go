package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"egret.io/egret/internal/transport"
)

// watchDelay is how long a request waits on the far side (resolving,
// dialling, a member's CONNECT answer, a response header) before egret
// starts watching its client: most waits are over sooner and then cost
// one timer, no goroutine and no read.
const watchDelay = 50 * time.Millisecond

// clientWatch cancels a request's context when its client goes away while
// the request waits on the far side, so a dial or an upstream that hangs
// is not waited out for nobody. The watch is a read on the client
// connection: it fails when the client closed or reset; bytes it gets (a
// pipelined request, the start of a tunnel's payload) are kept.
type clientWatch struct {
	cancel context.CancelFunc
	timer  *time.Timer
	done   chan struct{}
	c      net.Conn
	// peek waits for a byte from the client without consuming it (the
	// explicit listener's buffered reader); nil reads one byte into got.
	peek func() error
	got  []byte
	gone bool // the read failed: the client closed or reset
	// interrupt, if set, also ends a wait that does not follow the
	// context (a blocking read of a response header).
	interrupt func()
}

// watchClient returns ctx's child for a wait on behalf of the client on c,
// and the function that ends the watch (call it before the connection is
// read again or handed to a tunnel). peek, if not nil, reads without
// consuming; otherwise the bytes read are returned by stop. interrupt, if
// not nil, is called too when the client is gone.
func watchClient(ctx context.Context, c net.Conn, peek func() error, interrupt func()) (context.Context, func() ([]byte, bool)) {
	ctx, cancel := context.WithCancel(ctx)
	w := &clientWatch{cancel: cancel, done: make(chan struct{}), c: c, peek: peek, interrupt: interrupt}
	w.timer = time.AfterFunc(watchDelay, w.run)
	return ctx, w.stop
}

func (w *clientWatch) run() {
	defer close(w.done)
	var err error
	if w.peek != nil {
		err = w.peek()
	} else {
		var b [1]byte
		var n int
		n, err = w.c.Read(b[:])
		w.got = append(w.got, b[:n]...)
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		w.gone = true
		w.cancel() // the client is gone
		if w.interrupt != nil {
			w.interrupt()
		}
	}
}

// stop ends the watch. It returns the bytes the watch read (without
// peek) and whether the client went away.
func (w *clientWatch) stop() ([]byte, bool) {
	if w.timer.Stop() {
		w.cancel()
		return nil, false // it never started
	}
	w.c.SetReadDeadline(time.Unix(1, 0)) // in the past: the read returns
	<-w.done
	w.c.SetReadDeadline(time.Time{})
	w.cancel()
	return w.got, w.gone
}

// connWatch is the explicit listener's watch of its client: clientWatch
// without a context or a timer of its own. A connection has one, reused by
// each request and tunnel it carries, and a client that goes away cancels
// the connection's context (the connection ends with it), so a watch
// allocates nothing after the connection's first.
type connWatch struct {
	cc    *clientConn
	timer *time.Timer
	// running is the watch begun by the timer (run), or the watch armed
	// whose timer stop stopped: stop waits for it. (A WaitGroup, not a
	// channel per watch: nothing to allocate.)
	running   sync.WaitGroup
	gone      bool
	interrupt func()
	stopFn    func() ([]byte, bool) // stop, bound once
}

// watchClient is watchClient for the connection's own waits: it returns
// the connection's context and the function that ends the watch.
func (cc *clientConn) watchClient(interrupt func()) (context.Context, func() ([]byte, bool)) {
	w := &cc.w
	w.interrupt, w.gone = interrupt, false
	w.running.Add(1)
	if w.timer == nil {
		w.cc, w.stopFn = cc, w.stop
		w.timer = time.AfterFunc(watchDelay, w.run)
	} else {
		w.timer.Reset(watchDelay)
	}
	return cc.ctx, w.stopFn
}

func (w *connWatch) run() {
	defer w.running.Done()
	if err := w.cc.peekByte(); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		w.gone = true
		w.cc.cancel() // the client is gone: so is the connection
		if w.interrupt != nil {
			w.interrupt()
		}
	}
}

// stop ends the watch and reports whether the client went away.
func (w *connWatch) stop() ([]byte, bool) {
	if w.timer.Stop() {
		w.running.Done()
		return nil, false // it never started
	}
	w.cc.c.SetReadDeadline(time.Unix(1, 0)) // in the past: the read returns
	w.running.Wait()
	w.cc.c.SetReadDeadline(time.Time{})
	return nil, w.gone
}

// errClientLeft is the cause of a request given up because its client
// went away while it waited: the one sentinel (transport.ErrClientLeft,
// http1's), so errors.Is matches it wherever it was made.
var errClientLeft = transport.ErrClientLeft

package relay

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Buffer size classes. A direction starts with the smallest and moves up
// after growAfter consecutive reads that fill its buffer.
var sizes = [...]int{16 << 10, 64 << 10, 256 << 10}

const growAfter = 2

var pools [len(sizes)]sync.Pool

// held counts buffers taken from the pools and not yet returned (tests
// check that idle tunnels hold none).
var held atomic.Int64

func init() {
	for i := range pools {
		n := sizes[i]
		pools[i].New = func() any { b := make([]byte, n); return &b }
	}
}

// Tunnel relays between A (the client side) and B (the destination side).
// Create it with New, start it with Start; it is safe to call Close and the
// accessors from other goroutines while it runs.
type Tunnel struct {
	A, B net.Conn

	up, down atomic.Int64 // bytes A→B and B→A
	last     atomic.Int64 // unix nanoseconds of the last activity
	closed   atomic.Bool
	pending  atomic.Int32
	errOnce  sync.Once
	err      error
	started  time.Time
}

// New returns a Tunnel between a and b.
func New(a, b net.Conn) *Tunnel {
	t := &Tunnel{A: a, B: b, started: time.Now()}
	t.last.Store(t.started.UnixNano())
	return t
}

// Result describes a finished tunnel.
type Result struct {
	Up, Down int64         // bytes A→B and B→A
	Duration time.Duration // from New to the end
	Err      error         // the first error other than a normal end of stream, if any
}

// Start begins relaying. aPrefix is sent to B and bPrefix to A before
// anything read from the connections (bytes a handshake already consumed).
// done is called once, from one of the relay goroutines, after both
// directions have ended and both connections are closed.
func (t *Tunnel) Start(aPrefix, bPrefix []byte, done func(Result)) {
	t.pending.Store(2)
	finish := func() {
		if t.pending.Add(-1) == 0 {
			t.closeBoth()
			if done != nil {
				done(Result{Up: t.up.Load(), Down: t.down.Load(), Duration: time.Since(t.started), Err: t.err})
			}
		}
	}
	go func() { t.copy(t.B, t.A, aPrefix, &t.up); finish() }()
	go func() { t.copy(t.A, t.B, bPrefix, &t.down); finish() }()
}

// Run relays and blocks until the tunnel ends.
func (t *Tunnel) Run(aPrefix, bPrefix []byte) Result {
	ch := make(chan Result, 1)
	t.Start(aPrefix, bPrefix, func(r Result) { ch <- r })
	return <-ch
}

// Close ends the tunnel now; both relay goroutines return promptly.
func (t *Tunnel) Close() { t.closeBoth() }

// Bytes returns the bytes relayed so far, A→B and B→A.
func (t *Tunnel) Bytes() (up, down int64) { return t.up.Load(), t.down.Load() }

// LastActivity returns when data last moved (or the tunnel started).
func (t *Tunnel) LastActivity() time.Time { return time.Unix(0, t.last.Load()) }

func (t *Tunnel) closeBoth() {
	if t.closed.CompareAndSwap(false, true) {
		t.A.Close()
		t.B.Close()
	}
}

func (t *Tunnel) fail(err error) {
	if err == nil || t.closed.Load() {
		return
	}
	t.errOnce.Do(func() { t.err = err })
	t.closeBoth()
}

// copy moves src → dst until src ends or something fails.
func (t *Tunnel) copy(dst, src net.Conn, prefix []byte, n *atomic.Int64) {
	if len(prefix) > 0 {
		w, err := dst.Write(prefix)
		n.Add(int64(w))
		if err != nil {
			t.fail(err)
			return
		}
	}
	var w waiter
	w.init(src)
	class, full := 0, 0
	var buf *[]byte
	release := func() {
		if buf != nil {
			pools[class].Put(buf)
			buf = nil
			held.Add(-1)
		}
	}
	defer release()
	for {
		// Where the source is not pollable (a TLS connection, say) wait
		// does nothing and the read below blocks holding its buffer.
		if err := w.wait(release); err != nil {
			t.fail(err)
			return
		}
		if buf == nil {
			buf = pools[class].Get().(*[]byte)
			held.Add(1)
		}
		r, rerr := src.Read(*buf)
		if r > 0 {
			t.last.Store(time.Now().UnixNano())
			w, werr := dst.Write((*buf)[:r])
			n.Add(int64(w))
			if werr != nil {
				t.fail(werr)
				return
			}
			if r == len(*buf) {
				if full++; full >= growAfter && class < len(sizes)-1 {
					release()
					class++
					full = 0
				}
			} else {
				full = 0
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				if !closeWrite(dst) {
					t.closeBoth()
				}
				return
			}
			t.fail(rerr)
			return
		}
	}
}

// closeWrite half-closes c when it can; it reports whether it did.
func closeWrite(c net.Conn) bool {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite() == nil
	}
	return false
}

// waiter waits for a connection to become readable without holding a
// buffer, where the connection allows it.
type waiter struct {
	rc   syscall.RawConn
	peek [1]byte
}

func (w *waiter) init(c net.Conn) {
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil && canPeek {
			w.rc = rc
		}
	}
}

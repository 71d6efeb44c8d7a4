package relay

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Buffer size classes. A direction starts with the smallest and moves up
// after growAfter consecutive reads that fill its buffer.
var sizes = [...]int{16 << 10, 64 << 10, 256 << 10}

const growAfter = 2

// spliceAfter is how many bytes a direction moves with read/write before
// it splices (splice_linux.go): past the first messages of a connection,
// a flow that keeps going is a transfer.
const spliceAfter = 1 << 20

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

// ParkAfter is how long a direction waits for data with its goroutine
// before it parks: the goroutine ends and the connection is watched in
// egret's own epoll set until data comes, so an idle tunnel costs neither a
// buffer nor a goroutine stack. Zero disables parking. New reads it. The
// environment variable EGRET_RELAY_PARK_AFTER (a Go duration; 0 never
// parks) sets it at start-up, so a benchmark can measure parked tunnels
// beside tunnels that wait with their goroutines, with the same binary
// (docs/performance.md).
var ParkAfter = parkAfterFromEnv(200 * time.Millisecond)

// parkAfterFromEnv is EGRET_RELAY_PARK_AFTER when it is set and valid
// (a negative duration counts as zero), def otherwise.
func parkAfterFromEnv(def time.Duration) time.Duration {
	v, ok := os.LookupEnv("EGRET_RELAY_PARK_AFTER")
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		slog.Warn("EGRET_RELAY_PARK_AFTER is not a Go duration; parking after the default (set e.g. 200ms, or 0 never to park)",
			"value", v, "default", def.String())
		return def
	}
	return max(d, 0)
}

// testBeforeWait, when set by a test, runs before every wait.
var testBeforeWait func()

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
	// mu guards detaching (detach_linux.go): A and B are nil while
	// detached is set, the sockets then held as bare descriptors.
	detached  bool
	mayDetach bool // Detach when the tunnel was made
	mu        sync.Mutex
	err       error
	started   time.Time
	done      func(Result)
	dirs      [2]direction
	parkAfter time.Duration

	// OnPanic, when set (before Start), is called with what a relay
	// goroutine of the tunnel recovered from a panic, and its stack;
	// either way the tunnel is closed and done is called, and the process
	// goes on. The value may hold anything the panicking code had at hand:
	// log its type, not its text.
	OnPanic func(v any, stack []byte)

	afterClose atomic.Pointer[func()] // AfterClose
}

// AfterClose arranges for f to be called when Close ends the tunnel (at
// once if it has ended): a tunnel whose bytes another component moves (an
// intercepted one, registered but never started) learns that egret cut it
// off. f may be called more than once.
func (t *Tunnel) AfterClose(f func()) {
	t.afterClose.Store(&f)
	if t.closed.Load() {
		f()
	}
}

// ErrPanic is the Result.Err of a tunnel a relay goroutine's panic ended.
var ErrPanic = errors.New("relay: a relay goroutine panicked; the tunnel was closed")

// panics counts the panics relay goroutines recovered from (Panics).
var panics atomic.Uint64

// Panics is how many panics relay goroutines have recovered from since the
// process started.
func Panics() uint64 { return panics.Load() }

// Direction states.
const (
	running int32 = iota
	parked
	ended
)

// direction is one half of a tunnel: src → dst. Its state lives here, not
// on a goroutine's stack, so a parked direction can be resumed by a new
// goroutine.
type direction struct {
	t        *Tunnel
	dst, src net.Conn
	n        *atomic.Int64
	prefix   []byte
	w        waiter
	buf      *[]byte
	moved    int64 // bytes read since the direction started or resumed
	state    atomic.Int32
	parkedFD int32 // the socket armed in the park set (valid while parked)
	class    uint8 // the buffer's size class (sizes)
	full     uint8 // consecutive reads that filled the buffer
	// more is set while the source may have bytes at hand: the next read
	// (which never blocks) goes without waiting first. A read that finds
	// nothing clears it, and the direction waits.
	more bool
	// sp splices the direction's bulk bursts (splice_linux.go) between
	// the source's RawConn and the destination's (the other direction's
	// waiter's); splicing is set once the direction filled its largest
	// buffer, canSplice when both sides are sockets.
	canSplice bool
	splicing  bool
	sp        splicer
}

// New returns a Tunnel between a and b.
func New(a, b net.Conn) *Tunnel {
	t := &Tunnel{A: a, B: b, started: time.Now(), parkAfter: ParkAfter, mayDetach: Detach}
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
// done is called once, from a relay goroutine (or from Close), after both
// directions have ended and both connections are closed.
func (t *Tunnel) Start(aPrefix, bPrefix []byte, done func(Result)) {
	t.init(aPrefix, bPrefix, done)
	for i := range t.dirs {
		go t.dirs[i].run()
	}
}

// StartInline is Start with the direction A → B left to the caller: it
// starts B → A on a goroutine and returns the function that relays A → B,
// which the caller must call once, on a goroutine of its own that has
// nothing else to do meanwhile (it returns when the direction ended or
// parked). A tunnel then costs one new goroutine instead of two.
func (t *Tunnel) StartInline(aPrefix, bPrefix []byte, done func(Result)) (run func()) {
	t.init(aPrefix, bPrefix, done)
	go t.dirs[1].run()
	return t.dirs[0].run
}

func (t *Tunnel) init(aPrefix, bPrefix []byte, done func(Result)) {
	t.done = done
	t.pending.Store(2)
	t.dirs[0] = direction{t: t, dst: t.B, src: t.A, n: &t.up, prefix: aPrefix}
	t.dirs[1] = direction{t: t, dst: t.A, src: t.B, n: &t.down, prefix: bPrefix}
	for i := range t.dirs {
		t.dirs[i].w.init(t.dirs[i].src)
	}
	for i := range t.dirs {
		d := &t.dirs[i]
		d.canSplice = canSplice && d.w.rc != nil && d.peer().w.rc != nil
	}
}

// Close ends the tunnel now; running directions return promptly and parked
// ones end here.
func (t *Tunnel) Close() { t.closeBoth() }

// Touch records activity on a tunnel whose bytes another component moves
// (an intercepted tunnel, which is registered but never started), so the
// idle reaper judges it by its traffic too.
func (t *Tunnel) Touch() { t.last.Store(time.Now().UnixNano()) }

// LastActivity returns when data last moved (or the tunnel started).
func (t *Tunnel) LastActivity() time.Time { return time.Unix(0, t.last.Load()) }

func (t *Tunnel) closeBoth() {
	if !t.closed.CompareAndSwap(false, true) {
		return
	}
	t.mu.Lock()
	if t.detached {
		t.closeDetached()
	} else if t.A != nil {
		t.A.Close()
		t.B.Close()
	}
	t.mu.Unlock()
	if f := t.afterClose.Load(); f != nil {
		(*f)()
	}
	// A parked direction has no goroutine to notice the close, and the
	// kernel drops a closed descriptor from the epoll set without an event:
	// end it here. The epoll goroutine may race us for it; the state CAS
	// decides who owns it.
	for i := range t.dirs {
		d := &t.dirs[i]
		if d.state.CompareAndSwap(parked, ended) {
			forget(d)
			d.finish()
		}
	}
}

func (t *Tunnel) fail(err error) {
	if err == nil || t.closed.Load() {
		return
	}
	t.errOnce.Do(func() { t.err = err })
	t.closeBoth()
}

// peer is the tunnel's other direction: its source is d's destination.
func (d *direction) peer() *direction {
	if d == &d.t.dirs[0] {
		return &d.t.dirs[1]
	}
	return &d.t.dirs[0]
}

// finish is called once per direction when it has ended.
func (d *direction) finish() {
	t := d.t
	if t.pending.Add(-1) == 0 {
		t.closeBoth()
		if t.done != nil {
			t.done(Result{Up: t.up.Load(), Down: t.down.Load(), Duration: time.Since(t.started), Err: t.err})
		}
	}
}

// run relays until the direction ends or parks; it is the body of the
// direction's goroutine, started by Start or by the parker on wake-up.
func (d *direction) run() {
	defer func() {
		if v := recover(); v != nil {
			d.recovered(v)
		}
	}()
	if !d.attach() {
		if d.state.CompareAndSwap(running, ended) {
			d.finish()
		}
		return
	}
	if d.relay() {
		return // parked, or already ended by Close: not ours any more
	}
	d.release()
	if d.state.CompareAndSwap(running, ended) {
		d.finish()
	}
}

// recovered ends a direction whose goroutine panicked: the tunnel is closed
// and the direction finished, so done still comes once and what the tunnel
// holds is released. Its buffer and pipe are dropped, not pooled: their
// state is unknown.
func (d *direction) recovered(v any) {
	panics.Add(1)
	t := d.t
	if t.OnPanic != nil {
		t.OnPanic(v, debug.Stack())
	}
	t.errOnce.Do(func() { t.err = ErrPanic })
	t.closeBoth()
	if d.buf != nil {
		d.buf = nil
		held.Add(-1)
	}
	d.sp.discard()
	if d.state.CompareAndSwap(running, ended) {
		d.finish()
	}
}

func (d *direction) release() {
	if d.buf != nil {
		pools[d.class].Put(d.buf)
		d.buf = nil
		held.Add(-1)
	}
	d.sp.done()
}

// relay moves src → dst. It returns true when the direction parked (the
// goroutine must then touch nothing of d), false when it ended.
func (d *direction) relay() bool {
	t := d.t
	if len(d.prefix) > 0 {
		w, err := d.dst.Write(d.prefix)
		d.n.Add(int64(w))
		d.prefix = nil
		if err != nil {
			t.fail(err)
			return false
		}
	}
	d.more = true // try the source before waiting on it
	for {
		if !d.more {
			// The source had nothing at hand: wait for it without a
			// buffer. Where the source is not pollable (a TLS connection,
			// say) wait returns at once and the read below blocks holding
			// its buffer.
			d.release()
			if testBeforeWait != nil {
				testBeforeWait()
			}
			idle := d.w.wait(d.src, t.parkAfter)
			d.more = true
			if idle {
				// An idle direction starts small again when it resumes.
				d.class, d.full, d.splicing, d.moved = 0, 0, false, 0
				switch park(d) {
				case parkedOK:
					return true
				case parkLost:
					return true // Close ended the direction meanwhile
				}
				continue // could not park: wait with the goroutine
			}
		}
		if d.splicing {
			n, eof, err := d.sp.move(d.w.rc, d.peer().w.rc)
			d.more = n > 0
			if n > 0 {
				t.last.Store(time.Now().UnixNano())
				d.n.Add(n)
			}
			switch {
			case err == errNoSplice:
				d.splicing, d.canSplice = false, false
				continue
			case err != nil:
				t.fail(err)
				return false
			case eof:
				d.endOfStream()
				return false
			}
			continue
		}
		if d.buf == nil {
			d.buf = pools[d.class].Get().(*[]byte)
			held.Add(1)
		}
		var r int
		var rerr error
		if d.w.rc != nil {
			// Read what is at hand without blocking: after a full read
			// (no wait before it) the source may have run dry, and the
			// poller's readiness may be stale (edge-triggered); either way
			// the direction goes back to the wait, which releases the
			// buffer and may park, instead of blocking while holding it.
			var ok bool
			if r, rerr, ok = d.w.tryRead(*d.buf); !ok {
				d.more = false
				continue
			}
		} else {
			r, rerr = d.src.Read(*d.buf)
		}
		if r > 0 {
			t.last.Store(time.Now().UnixNano())
			w, werr := d.dst.Write((*d.buf)[:r])
			d.n.Add(int64(w))
			if werr != nil {
				t.fail(werr)
				return false
			}
			d.moved += int64(r)
			switch full := r == len(*d.buf); {
			case d.canSplice && d.moved >= spliceAfter:
				// A transfer: splice from now on.
				d.release()
				d.splicing = true
			case !full:
				d.full = 0
			case d.full+1 < growAfter:
				d.full++
			case int(d.class) < len(sizes)-1:
				d.release()
				d.class++
				d.full = 0
			}
		}
		if rerr != nil {
			d.more = false
			if errors.Is(rerr, io.EOF) {
				d.endOfStream()
				return false
			}
			t.fail(rerr)
			return false
		}
	}
}

// endOfStream passes the source's end of stream on with a half-close,
// unless the other direction has already ended: then the tunnel is over
// and closing both sides says it with one call less.
func (d *direction) endOfStream() {
	if d.t.pending.Load() == 1 || !closeWrite(d.dst) {
		d.t.closeBoth()
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
// buffer, and reads it without blocking, where the connection allows it.
type waiter struct {
	rc syscall.RawConn
	// The raw read's state (wait_linux.go): one function, bound once in
	// init, serves every tryRead and wait, so neither allocates a closure
	// per call.
	fn    func(fd uintptr) bool
	p     []byte // tryRead's buffer, during the call
	n     int
	errno syscall.Errno
	mode  uint8   // what fn does: rawRead, rawWait, rawWaited
	peek  [1]byte // wait's look at the socket (wait_linux.go)
}

// The modes of waiter.fn.
const (
	rawRead   uint8 = iota // read p into n, errno
	rawWait                // report not ready once: wait in the poller
	rawWaited              // the wait is over
)

func (w *waiter) init(c net.Conn) {
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil && rawReads {
			w.rc = rc
			w.fn = w.raw
		}
	}
}

// isDeadline reports whether err is a read deadline expiring.
func isDeadline(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

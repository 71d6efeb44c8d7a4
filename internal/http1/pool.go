package http1

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of the pool of idle connections to origins and upstream members.
const (
	IdlePerKey  = 256
	IdleTotal   = 1024
	IdleTimeout = 90 * time.Second
	// checkAfter: a connection idle for longer is checked for a close from
	// the other side (one non-blocking peek) before it carries a request;
	// so is every connection taken for a request that may not be sent
	// twice.
	checkAfter = time.Second
)

// Conn is a connection forwarded requests are written to: to an origin,
// directly or through a member's tunnel, or to an upstream member that
// takes requests in absolute form.
type Conn struct {
	// Conn is what requests are written to (TLS for https origins); Raw
	// is the socket beneath, peeked before reuse.
	Conn, Raw net.Conn
	// Gen is the pool generation the connection was made in (Pool.Gen).
	Gen uint64
	// Reused is set once the connection carried a request before.
	Reused bool

	idleAt time.Time
	lr     countingReader
	// R and W are its buffers while it is in use (nil while idle).
	R *bufio.Reader
	W *bufio.Writer
}

// NewConn wraps c (over the socket raw) for requests, with buffers.
func NewConn(c, raw net.Conn, gen uint64) *Conn {
	oc := &Conn{Conn: c, Raw: raw, Gen: gen}
	oc.attach()
	return oc
}

// attach gives the connection its buffers for a request.
func (oc *Conn) attach() {
	oc.lr.c = oc.Conn
	oc.R = GetReader(&oc.lr)
	oc.W = GetWriter(oc.Conn)
}

// Detach returns the buffers to their pools (the connection becomes a
// tunnel, or idles).
func (oc *Conn) Detach() {
	if oc.R != nil {
		PutReader(oc.R)
		PutWriter(oc.W)
		oc.R, oc.W = nil, nil
	}
}

// Close closes the connection and gives back its buffers.
func (oc *Conn) Close() {
	oc.Conn.Close()
	oc.Detach()
}

// N is the number of bytes read from the connection so far.
func (oc *Conn) N() int64 { return oc.lr.n }

// ReadResponse reads a response header for req, bounded to max bytes. hit
// reports that the bound was reached.
func (oc *Conn) ReadResponse(req *http.Request, max int) (resp *http.Response, hit bool, err error) {
	oc.lr.limit(int64(max))
	resp, err = http.ReadResponse(oc.R, req)
	oc.lr.unlimit()
	return resp, oc.lr.hit, err
}

// Pool keeps idle keep-alive connections per key (which requests a
// connection may carry, like http.Transport's connectMethodKey), newest
// last. It is safe for concurrent use; the zero value is not, use NewPool.
type Pool[K comparable] struct {
	mu     sync.Mutex
	idle   map[K][]*Conn
	n      int
	closed bool
	// gen is the generation new connections get; Retire moves it on so
	// connections busy during a retirement are closed, not pooled, when
	// they come back.
	gen       atomic.Uint64
	sweepOnce sync.Once
}

// NewPool returns an empty pool.
func NewPool[K comparable]() *Pool[K] {
	return &Pool[K]{idle: map[K][]*Conn{}}
}

// Gen is the generation to give new connections.
func (p *Pool[K]) Gen() uint64 { return p.gen.Load() }

// Get returns an idle connection for k, checked for a close from the other
// side when it idled for long or check is set; nil when there is none.
func (p *Pool[K]) Get(k K, check bool) *Conn {
	for {
		now := time.Now()
		p.mu.Lock()
		l := p.idle[k]
		if len(l) == 0 {
			p.mu.Unlock()
			return nil
		}
		oc := l[len(l)-1]
		l[len(l)-1] = nil
		p.idle[k] = l[:len(l)-1]
		p.n--
		p.mu.Unlock()
		idle := now.Sub(oc.idleAt)
		if idle > IdleTimeout || ((check || idle > checkAfter) && !Alive(oc.Raw)) {
			oc.Conn.Close()
			continue
		}
		oc.attach()
		return oc
	}
}

// Put gives a connection for k whose last exchange ended cleanly back to
// the pool, or closes it when the pool is full, closed or the connection
// is from a retired generation.
func (p *Pool[K]) Put(k K, oc *Conn) {
	oc.Detach()
	oc.idleAt = time.Now()
	oc.Reused = true
	p.mu.Lock()
	if p.closed || oc.Gen != p.gen.Load() || p.n >= IdleTotal || len(p.idle[k]) >= IdlePerKey {
		p.mu.Unlock()
		oc.Conn.Close()
		return
	}
	p.idle[k] = append(p.idle[k], oc)
	p.n++
	p.mu.Unlock()
}

// Retire closes every idle connection; connections in use now are closed
// when they come back.
func (p *Pool[K]) Retire() {
	p.gen.Add(1)
	p.mu.Lock()
	var all []*Conn
	for k, l := range p.idle {
		all = append(all, l...)
		delete(p.idle, k)
	}
	p.n = 0
	p.mu.Unlock()
	for _, oc := range all {
		oc.Conn.Close()
	}
}

// Drop closes the idle connections pooled for k and forgets k: a key
// that names one client connection is dropped when that client leaves.
func (p *Pool[K]) Drop(k K) {
	p.mu.Lock()
	l := p.idle[k]
	delete(p.idle, k)
	p.n -= len(l)
	p.mu.Unlock()
	for _, oc := range l {
		oc.Conn.Close()
	}
}

// Close retires everything and pools nothing more.
func (p *Pool[K]) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Retire()
}

// Sweep closes connections idle for longer than IdleTimeout and forgets
// keys without connections.
func (p *Pool[K]) Sweep(now time.Time) {
	var stale []*Conn
	p.mu.Lock()
	for k, l := range p.idle {
		i := 0
		for i < len(l) && now.Sub(l[i].idleAt) > IdleTimeout {
			i++ // oldest first
		}
		if i > 0 {
			stale = append(stale, l[:i]...)
			n := copy(l, l[i:])
			clear(l[n:])
			l = l[:n]
			p.n -= i
		}
		if len(l) == 0 {
			delete(p.idle, k)
		} else {
			p.idle[k] = l
		}
	}
	p.mu.Unlock()
	for _, oc := range stale {
		oc.Conn.Close()
	}
}

// StartSweeper sweeps the pool every half IdleTimeout until stop closes.
func (p *Pool[K]) StartSweeper(stop <-chan struct{}) {
	p.sweepOnce.Do(func() {
		go func() {
			tick := time.NewTicker(IdleTimeout / 2)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case now := <-tick.C:
					p.Sweep(now)
				}
			}
		}()
	})
}

// IdleFor returns the idle connections pooled for k.
func (p *Pool[K]) IdleFor(k K) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle[k])
}

// Idle returns the idle connections pooled.
func (p *Pool[K]) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

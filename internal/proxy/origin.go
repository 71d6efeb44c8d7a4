package proxy

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"egret.io/egret/internal/upstream"
)

// Limits of the pool of idle connections to origins and upstream members.
const (
	originIdlePerKey  = 256
	originIdleTotal   = 1024
	originIdleTimeout = 90 * time.Second
	// originCheckAfter: a connection idle for longer is checked for a close
	// from the other side (one non-blocking peek) before it carries a
	// request; so is every connection taken for a request that may not be
	// sent twice.
	originCheckAfter = time.Second
)

// originKey says which requests a connection may carry, like
// http.Transport's connectMethodKey.
type originKey struct {
	// member is the upstream the connection goes through; nil when direct.
	member *upstream.Member
	// scheme is "http" or "https" for a connection that speaks to the
	// origin (direct, or tunnelled through the member), "" for one that
	// speaks to an http(s) member in absolute form, for any origin.
	scheme string
	// addr is the origin's host:port; "" with scheme "".
	addr string
}

// originConn is a connection forwarded requests are written to.
type originConn struct {
	conn   net.Conn // what requests are written to (TLS for https origins)
	raw    net.Conn // the socket beneath, peeked before reuse
	key    originKey
	gen    uint64
	idleAt time.Time
	reused bool
	lr     limitReader
	br     *bufio.Reader // while in use
	bw     *bufio.Writer // while in use
}

func newOriginConn(c, raw net.Conn, key originKey, gen uint64) *originConn {
	oc := &originConn{conn: c, raw: raw, key: key, gen: gen}
	oc.attach()
	return oc
}

// attach gives the connection its buffers for a request.
func (oc *originConn) attach() {
	oc.lr.c = oc.conn
	oc.br = getReader(&oc.lr)
	oc.bw = getWriter(oc.conn)
}

// detach returns the buffers to their pools.
func (oc *originConn) detach() {
	if oc.br != nil {
		putReader(oc.br)
		putWriter(oc.bw)
		oc.br, oc.bw = nil, nil
	}
}

// close closes the connection and gives back its buffers.
func (oc *originConn) close() {
	oc.conn.Close()
	oc.detach()
}

// originPool keeps idle keep-alive connections, newest last per key. It is
// safe for concurrent use.
type originPool struct {
	mu     sync.Mutex
	idle   map[originKey][]*originConn
	n      int
	closed bool
	// gen is the generation new connections get; retire moves it on so
	// connections busy during a retirement are closed, not pooled, when
	// they come back.
	gen       atomic.Uint64
	sweepOnce sync.Once
}

func newOriginPool() *originPool {
	return &originPool{idle: map[originKey][]*originConn{}}
}

// get returns an idle connection for k, checked for a close from the other
// side when it idled for long or check is set; nil when there is none.
func (p *originPool) get(k originKey, check bool) *originConn {
	for {
		now := time.Now()
		var stale *originConn
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
		switch {
		case idle > originIdleTimeout:
			stale = oc
		case (check || idle > originCheckAfter) && !alive(oc.raw):
			stale = oc
		}
		if stale != nil {
			stale.conn.Close()
			continue
		}
		oc.attach()
		return oc
	}
}

// put gives a connection whose last exchange ended cleanly back to the
// pool, or closes it when the pool is full, closed or the connection is
// from a retired generation.
func (p *originPool) put(oc *originConn) {
	oc.detach()
	oc.idleAt = time.Now()
	oc.reused = true
	p.mu.Lock()
	if p.closed || oc.gen != p.gen.Load() || p.n >= originIdleTotal || len(p.idle[oc.key]) >= originIdlePerKey {
		p.mu.Unlock()
		oc.conn.Close()
		return
	}
	p.idle[oc.key] = append(p.idle[oc.key], oc)
	p.n++
	p.mu.Unlock()
}

// retire closes every idle connection; connections in use now are closed
// when they come back.
func (p *originPool) retire() {
	p.gen.Add(1)
	p.mu.Lock()
	var all []*originConn
	for k, l := range p.idle {
		all = append(all, l...)
		delete(p.idle, k)
	}
	p.n = 0
	p.mu.Unlock()
	for _, oc := range all {
		oc.conn.Close()
	}
}

// close retires everything and pools nothing more.
func (p *originPool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.retire()
}

// sweep closes connections idle for longer than the idle timeout and
// forgets keys without connections.
func (p *originPool) sweep(now time.Time) {
	var stale []*originConn
	p.mu.Lock()
	for k, l := range p.idle {
		i := 0
		for i < len(l) && now.Sub(l[i].idleAt) > originIdleTimeout {
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
		oc.conn.Close()
	}
}

// startSweeper sweeps the pool every half idle timeout until stop closes.
func (p *originPool) startSweeper(stop <-chan struct{}) {
	p.sweepOnce.Do(func() { go everyUntil(stop, originIdleTimeout/2, p.sweep) })
}

// idleCount returns the idle connections pooled for k (tests).
func (p *originPool) idleCount(k originKey) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle[k])
}

// total returns the idle connections pooled (tests).
func (p *originPool) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

package http1

import (
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// fakeConn is a net.Conn that records Close.
type fakeConn struct {
	net.Conn
	closed atomic.Bool
}

func (f *fakeConn) Close() error { f.closed.Store(true); return nil }

func TestOriginPoolLimits(t *testing.T) {
	pool := NewPool[string]()
	conn := func(k string) (*Conn, *fakeConn) {
		fc := &fakeConn{}
		return &Conn{Conn: fc, Raw: fc, Gen: pool.Gen()}, fc
	}
	k := "a.test:80"
	t.Run("per-key", func(t *testing.T) {
		var last *fakeConn
		for i := 0; i <= IdlePerKey; i++ {
			oc, fc := conn(k)
			pool.Put(k, oc)
			last = fc
		}
		if n := pool.IdleFor(k); n != IdlePerKey {
			t.Errorf("%d idle for one key, want %d", n, IdlePerKey)
		}
		if !last.closed.Load() {
			t.Error("the connection over the per-key limit was not closed")
		}
	})
	t.Run("total", func(t *testing.T) {
		var closed int
		for i := 0; i < IdleTotal; i++ {
			kk := "b" + strconv.Itoa(i) + ".test:80"
			oc, fc := conn(kk)
			pool.Put(kk, oc)
			if fc.closed.Load() {
				closed++
			}
		}
		if n := pool.Idle(); n != IdleTotal {
			t.Errorf("%d idle in total, want %d", n, IdleTotal)
		}
		if closed != IdlePerKey {
			t.Errorf("%d closed over the total limit, want %d", closed, IdlePerKey)
		}
	})
	t.Run("lifo-and-idle-timeout", func(t *testing.T) {
		pool.Retire()
		old, oldc := conn(k)
		fresh, _ := conn(k)
		pool.Put(k, old)
		pool.Put(k, fresh)
		if got := pool.Get(k, false); got != fresh {
			t.Error("get did not return the most recently used connection")
		}
		pool.mu.Lock()
		old.idleAt = time.Now().Add(-2 * IdleTimeout)
		pool.mu.Unlock()
		if got := pool.Get(k, false); got != nil || !oldc.closed.Load() {
			t.Errorf("a connection idle past the timeout was handed out (%v) or not closed", got)
		}
	})
	t.Run("sweep", func(t *testing.T) {
		a, ac := conn(k)
		pool.Put(k, a)
		pool.Sweep(time.Now().Add(2 * IdleTimeout))
		if !ac.closed.Load() || pool.Idle() != 0 {
			t.Error("sweep left an expired connection")
		}
	})
	t.Run("retire", func(t *testing.T) {
		a, ac := conn(k)
		busy, bc := conn(k) // in use while the pool is retired
		pool.Put(k, a)
		pool.Retire()
		if !ac.closed.Load() || pool.Idle() != 0 {
			t.Fatal("retire left an idle connection open")
		}
		pool.Put(k, busy)
		if !bc.closed.Load() || pool.Idle() != 0 {
			t.Error("a connection from before the retirement was pooled")
		}
	})
}

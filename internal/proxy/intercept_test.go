package proxy

import (
	"net"
	"testing"
	"time"

	"egret.io/egret/internal/relay"
)

// TestInterceptTouch: an intercepted tunnel is registered but its bytes
// are moved by the engine, not relay; every read and write through the
// client connection it is given marks the tunnel active, so the idle
// reaper judges it by its traffic and not by its age.
func TestInterceptTouch(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	tun := relay.New(a, b)
	start := tun.LastActivity()
	c := &touchConn{Conn: a, t: tun}
	time.Sleep(5 * time.Millisecond)
	go b.Write([]byte("x"))
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	afterRead := tun.LastActivity()
	if !afterRead.After(start) {
		t.Fatalf("a read did not mark the tunnel active: %v, %v", start, afterRead)
	}
	time.Sleep(5 * time.Millisecond)
	go b.Read(buf)
	if _, err := c.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if !tun.LastActivity().After(afterRead) {
		t.Fatal("a write did not mark the tunnel active")
	}
	if c.up.Load() != 1 || c.down.Load() != 1 {
		t.Errorf("bytes up %d down %d, want 1 and 1", c.up.Load(), c.down.Load())
	}
}

//go:build linux

package relay

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

func isParked(tun *Tunnel) bool {
	return tun.dirs[0].state.Load() == parked && tun.dirs[1].state.Load() == parked
}

func parkedCount() int {
	p := parker()
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.dirs)
}

func withParkAfter(t *testing.T, d time.Duration) {
	old := ParkAfter
	ParkAfter = d
	t.Cleanup(func() { ParkAfter = old })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Idle tunnels give up their goroutines and wake up when data comes.
func TestParkedTunnelsResume(t *testing.T) {
	withParkAfter(t, 20*time.Millisecond)
	g0 := runtime.NumGoroutine()
	const n = 100
	type end struct {
		c, s net.Conn
		tun  *Tunnel
	}
	var ends []end
	allParked := func() bool {
		for _, e := range ends {
			if !isParked(e.tun) {
				return false
			}
		}
		return true
	}
	for i := 0; i < n; i++ {
		c, s, _, tun := tunnel(t, nil, nil)
		ends = append(ends, end{c, s, tun})
	}
	waitUntil(t, "every direction to park", allParked)
	// A direction marked parked may still be returning from its
	// goroutine: wait for the count to settle (it never does while parked
	// directions keep goroutines: 2 per tunnel).
	waitUntil(t, fmt.Sprintf("at most %d goroutines with %d parked tunnels (started with %d): parked directions must not keep one", g0+20, n, g0),
		func() bool { return runtime.NumGoroutine() <= g0+20 })
	for round := 0; round < 2; round++ {
		for _, e := range ends {
			e.c.SetDeadline(time.Now().Add(5 * time.Second))
			e.s.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(e.c, "ping")
			buf := make([]byte, 4)
			if _, err := io.ReadFull(e.s, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("round %d: server got %q, %v", round, buf, err)
			}
			io.WriteString(e.s, "pong")
			if _, err := io.ReadFull(e.c, buf); err != nil || string(buf) != "pong" {
				t.Fatalf("round %d: client got %q, %v", round, buf, err)
			}
		}
		waitUntil(t, "the tunnels to park again", allParked)
	}
}

func TestCloseEndsParkedTunnel(t *testing.T) {
	withParkAfter(t, 10*time.Millisecond)
	base := parkedCount()
	c, _, res, tun := tunnel(t, nil, nil)
	waitUntil(t, "parking", func() bool { return isParked(tun) })
	base = parkedCount() - 2
	tun.Close()
	select {
	case <-res:
	case <-time.After(5 * time.Second):
		t.Fatal("closing a parked tunnel did not end it")
	}
	if parkedCount() != base {
		t.Errorf("park set still holds %d directions of a closed tunnel", parkedCount()-base)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("client read %v, want EOF", err)
	}
}

func TestPeerEndsParkedTunnel(t *testing.T) {
	withParkAfter(t, 10*time.Millisecond)
	peerEndsIdleTunnel(t, "parking", isParked)
}

// peerEndsIdleTunnel: once idle says the tunnel is (parked, detached), the
// server's "bye" and half-close reach the client, and the tunnel ends.
func peerEndsIdleTunnel(t *testing.T, what string, idle func(*Tunnel) bool) {
	t.Helper()
	c, s, res, tun := tunnel(t, nil, nil)
	waitUntil(t, what, func() bool { return idle(tun) })
	io.WriteString(s, "bye")
	s.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); err != nil || string(b) != "bye" {
		t.Fatalf("client got %q, %v; the half-close must pass through an idle (%s) tunnel", b, err, what)
	}
	c.Close()
	select {
	case r := <-res:
		if r.Down != 3 {
			t.Errorf("result %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("tunnel did not end")
	}
}

// Data that arrives between a read that found nothing and the wait that
// follows must wake the wait: the runtime's poller forgets a readiness it
// saw before the wait began (its RawRead resets it), so the wait checks
// the socket first. Without that check such a direction slept until its
// park deadline (200 ms) or, with parking off, for good. The test widens
// the window: every wait starts 5 ms after the read that found nothing.
func TestNoLostWakeUp(t *testing.T) {
	withParkAfter(t, 0) // nothing rescues a lost wake-up
	testBeforeWait = func() { time.Sleep(5 * time.Millisecond) }
	client, server, res, tun := tunnel(t, nil, nil)
	defer func() {
		tun.Close()
		<-res // the directions are over: nothing reads the hook any more
		testBeforeWait = nil
	}()
	buf := make([]byte, 4)
	for i := 0; i < 5; i++ {
		client.SetDeadline(time.Now().Add(2 * time.Second))
		server.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(client, "ping"); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(server, buf); err != nil {
			t.Fatalf("exchange %d: the server did not get the ping: %v", i, err)
		}
		if _, err := io.WriteString(server, "pong"); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, buf); err != nil {
			t.Fatalf("exchange %d: the client did not get the pong: %v", i, err)
		}
	}
}

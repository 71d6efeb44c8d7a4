//go:build linux

package relay

import (
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func withDetach(t *testing.T) {
	old := Detach
	Detach = true
	t.Cleanup(func() { Detach = old })
}

func isDetached(tun *Tunnel) bool {
	tun.mu.Lock()
	defer tun.mu.Unlock()
	return tun.detached
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// Detached tunnels (both directions parked, the sockets held as bare
// descriptors) carry data both ways when it comes, detach again when idle,
// and leave no descriptor behind when they end.
func TestDetachedTunnelsResume(t *testing.T) {
	withParkAfter(t, 20*time.Millisecond)
	withDetach(t)
	parker() // its epoll descriptor is the process's, not the test's
	fds0 := openFDs(t)
	const n = 50
	type end struct {
		c, s net.Conn
		res  chan Result
		tun  *Tunnel
	}
	var ends []end
	allDetached := func() bool {
		for _, e := range ends {
			if !isDetached(e.tun) {
				return false
			}
		}
		return true
	}
	for i := 0; i < n; i++ {
		c, s, res, tun := tunnel(t, nil, nil)
		ends = append(ends, end{c, s, res, tun})
	}
	waitUntil(t, "every tunnel to detach", allDetached)
	for round := 0; round < 3; round++ {
		for _, e := range ends {
			e.c.SetDeadline(time.Now().Add(5 * time.Second))
			e.s.SetDeadline(time.Now().Add(5 * time.Second))
			// Alternate which side speaks first: either socket's event
			// must attach the tunnel.
			first, second := e.c, e.s
			if round%2 == 1 {
				first, second = e.s, e.c
			}
			io.WriteString(first, "ping")
			buf := make([]byte, 4)
			if _, err := io.ReadFull(second, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("round %d: got %q, %v", round, buf, err)
			}
			io.WriteString(second, "pong")
			if _, err := io.ReadFull(first, buf); err != nil || string(buf) != "pong" {
				t.Fatalf("round %d: got %q, %v", round, buf, err)
			}
		}
		waitUntil(t, "the tunnels to detach again", allDetached)
	}
	// Half of them end by Close, the other half by their client leaving
	// (a half-close the server sees, then the server's close).
	for i, e := range ends {
		if i%2 == 0 {
			e.tun.Close()
		} else {
			e.c.Close()
		}
		e.s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(e.s); err != nil {
			t.Errorf("tunnel %d: the server read %v, want an end of stream", i, err)
		}
		e.s.Close()
		select {
		case <-e.res:
		case <-time.After(5 * time.Second):
			t.Fatalf("tunnel %d did not end", i)
		}
		e.c.Close()
	}
	// The test's own ends are closed too: what is left open is a leak.
	deadline := time.Now().Add(5 * time.Second)
	for openFDs(t) > fds0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := openFDs(t); n > fds0 {
		t.Errorf("%d descriptors open after the tunnels ended, %d before: a detached tunnel leaked %d", n, fds0, n-fds0)
	}
}

// A detached tunnel passes a half-close on when it resumes.
func TestPeerEndsDetachedTunnel(t *testing.T) {
	withParkAfter(t, 10*time.Millisecond)
	withDetach(t)
	peerEndsIdleTunnel(t, "detaching", isDetached)
}

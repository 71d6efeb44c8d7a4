package relay

import (
	"log/slog"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Detached tunnels (an experiment, off unless EGRET_RELAY_DETACH=1; see
// Detach). Once both directions of a tunnel are parked, the tunnel gives
// up its two net.Conns — Go's poll descriptor of each socket with its two
// deadline timers, the netFD and its addresses, about 1.7 KiB — and keeps
// each socket as a bare duplicate descriptor armed in the park set. When
// either socket has something to report, the direction woken attaches the
// tunnel again (net.FileConn on each descriptor) before it relays, and
// resumes the other direction too, which parks again if it stays idle.
//
// Ownership: a detached tunnel's descriptors are touched only under t.mu
// (detach, attach, closeBoth), and a parked direction belongs to whoever
// removes its entry from the park set's map (the parker's loop, detach,
// attach, forget), so no descriptor is closed twice or used after close.

// Detach turns detaching on for the tunnels New makes.
var Detach = detachFromEnv()

// detachFromEnv is EGRET_RELAY_DETACH: "1" on, unset, "" or "0" off; any
// other value is off, with a warning naming the values it takes.
func detachFromEnv() bool {
	switch v := os.Getenv("EGRET_RELAY_DETACH"); v {
	case "1":
		return true
	case "", "0":
		return false
	default:
		slog.Warn("EGRET_RELAY_DETACH takes 1 (on) or 0 (off); leaving detached tunnels off", "value", v)
		return false
	}
}

// detach detaches t if both its directions are parked and still armed.
func (t *Tunnel) detach(p *parkSet) {
	var failed bool
	t.mu.Lock()
	defer func() {
		t.mu.Unlock()
		if failed {
			t.closeBoth() // a socket we could not re-arm: end the tunnel rather than strand it
		}
	}()
	if t.closed.Load() || t.detached || t.A == nil {
		return
	}
	d0, d1 := &t.dirs[0], &t.dirs[1]
	if d0.w.rc == nil || d1.w.rc == nil {
		return
	}
	p.mu.Lock()
	if p.dirs[d0.parkedFD] != d0 || p.dirs[d1.parkedFD] != d1 {
		p.mu.Unlock()
		return // one of them was resumed meanwhile
	}
	delete(p.dirs, d0.parkedFD)
	delete(p.dirs, d1.parkedFD)
	p.mu.Unlock()
	// Both directions are ours: no event can resume them, and Close waits
	// for t.mu.
	var dups [2]int
	for i := range t.dirs {
		d := &t.dirs[i]
		dups[i] = -1
		d.w.rc.Control(func(fd uintptr) {
			// Out of the park set before the duplicate exists: a
			// registration outlives its descriptor while another refers to
			// the same socket.
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
			if nfd, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err == nil {
				dups[i] = nfd
			}
		})
	}
	if dups[0] < 0 || dups[1] < 0 {
		// Out of descriptors: stay attached, armed again.
		for i := range t.dirs {
			if dups[i] >= 0 {
				unix.Close(dups[i])
			}
			d := &t.dirs[i]
			if !d.arm(p, d.parkedFD) {
				failed = true
			}
		}
		return
	}
	t.A.Close()
	t.B.Close()
	t.A, t.B = nil, nil
	t.detached = true
	for i := range t.dirs {
		d := &t.dirs[i]
		d.src, d.dst, d.w = nil, nil, waiter{}
		d.canSplice = false
		if !d.arm(p, int32(dups[i])) {
			failed = true
		}
	}
}

// arm registers d's (parked) socket fd in the park set, one-shot.
func (d *direction) arm(p *parkSet, fd int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	d.parkedFD = fd
	p.dirs[fd] = d
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: fd}
	err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev)
	if err == unix.ENOENT {
		err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	}
	return err == nil
}

// attach gives a detached tunnel its connections back before d relays; it
// reports false when the tunnel is over (d must end).
func (d *direction) attach() bool {
	t := d.t
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return false // closeBoth closes the descriptors
	}
	if !t.detached {
		t.mu.Unlock()
		return true
	}
	p := parker()
	o := d.peer()
	resumeOther := false
	p.mu.Lock()
	if p.dirs[o.parkedFD] == o {
		delete(p.dirs, o.parkedFD)
		resumeOther = true
	}
	if p.dirs[d.parkedFD] == d {
		delete(p.dirs, d.parkedFD)
	}
	p.mu.Unlock()
	var conns [2]net.Conn
	var err error
	for i := range t.dirs {
		x := &t.dirs[i]
		fd := int(x.parkedFD)
		x.parkedFD = -1
		unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		if err != nil {
			unix.Close(fd)
			continue
		}
		f := os.NewFile(uintptr(fd), "")
		conns[i], err = net.FileConn(f) // a descriptor of its own
		f.Close()
	}
	t.detached = false
	if err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		t.mu.Unlock()
		t.fail(err)
		return false // o, still parked, is ended by closeBoth
	}
	t.A, t.B = conns[0], conns[1]
	t.dirs[0].src, t.dirs[0].dst = t.A, t.B
	t.dirs[1].src, t.dirs[1].dst = t.B, t.A
	for i := range t.dirs {
		t.dirs[i].w.init(t.dirs[i].src)
	}
	for i := range t.dirs {
		x := &t.dirs[i]
		x.canSplice = canSplice && x.w.rc != nil && x.peer().w.rc != nil
	}
	t.mu.Unlock()
	if resumeOther && o.state.CompareAndSwap(parked, running) {
		go o.run()
	}
	return true
}

// closeDetached closes a detached tunnel's descriptors (closeBoth, under
// t.mu).
func (t *Tunnel) closeDetached() {
	p := parker()
	for i := range t.dirs {
		d := &t.dirs[i]
		p.mu.Lock()
		if p.dirs[d.parkedFD] == d {
			delete(p.dirs, d.parkedFD)
		}
		p.mu.Unlock()
		if d.parkedFD >= 0 {
			unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(d.parkedFD), nil)
			unix.Close(int(d.parkedFD))
			d.parkedFD = -1
		}
	}
	t.detached = false
}

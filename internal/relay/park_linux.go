package relay

import (
	"sync"

	"golang.org/x/sys/unix"
)

// The parker watches parked directions in one epoll set of its own, served
// by one goroutine. A direction parks after ParkAfter without data: its
// goroutine ends (freeing the stack) and its socket is armed one-shot for
// readability; when data, an end of stream or an error arrives, a new
// goroutine resumes it. Go's own poller keeps watching the same socket;
// adding it to a second epoll set is allowed and independent.
type parkSet struct {
	epfd int
	mu   sync.Mutex
	dirs map[int32]*direction // armed socket → its direction
}

var (
	parkOnce sync.Once
	parkSetV *parkSet
)

// parker returns the process's park set, creating it on first use; nil
// when epoll is unavailable (directions then wait with their goroutines).
func parker() *parkSet {
	parkOnce.Do(func() {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		parkSetV = &parkSet{epfd: fd, dirs: map[int32]*direction{}}
		go parkSetV.loop()
	})
	return parkSetV
}

type parkResult int

const (
	parkedOK   parkResult = iota // parked: the goroutine must return
	parkFailed                   // not parked: keep waiting with the goroutine
	parkLost                     // Close ended the direction meanwhile: return
)

// park arms d's socket and hands d to the parker.
func park(d *direction) parkResult {
	p := parker()
	if p == nil || d.w.rc == nil {
		return parkFailed
	}
	// The state must say parked before the socket is armed, or an event
	// arriving at once would find a running direction and be dropped.
	if !d.state.CompareAndSwap(running, parked) {
		return parkLost
	}
	var fd int32 = -1
	var ctlErr error
	// Control holds a reference on the descriptor: it cannot be closed
	// (and its number reused) while we arm it.
	// The entry and the registration are made under p.mu together, so a
	// detach that finds the entry finds the socket armed.
	err := d.w.rc.Control(func(sfd uintptr) {
		fd = int32(sfd)
		p.mu.Lock()
		d.parkedFD = fd
		p.dirs[fd] = d
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: fd}
		ctlErr = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, int(sfd), &ev)
		if ctlErr == unix.ENOENT {
			ctlErr = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(sfd), &ev)
		}
		p.mu.Unlock()
	})
	if err == nil && ctlErr == nil {
		// d is no longer this goroutine's; detach claims both directions
		// (or nothing) through the park set's map.
		if d.t.mayDetach && d.peer().state.Load() == parked {
			d.t.detach(p)
		}
		return parkedOK
	}
	if fd >= 0 {
		p.mu.Lock()
		if p.dirs[fd] == d {
			delete(p.dirs, fd)
		}
		p.mu.Unlock()
	}
	if d.state.CompareAndSwap(parked, running) {
		return parkFailed
	}
	return parkLost
}

// forget drops a parked direction that Close ended.
func forget(d *direction) {
	p := parker()
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.dirs[d.parkedFD] == d {
		delete(p.dirs, d.parkedFD)
	}
	p.mu.Unlock()
}

func (p *parkSet) loop() {
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		for i := 0; i < n; i++ {
			fd := events[i].Fd
			p.mu.Lock()
			d := p.dirs[fd]
			delete(p.dirs, fd)
			p.mu.Unlock()
			// A stale event (for a descriptor closed and reused since) can
			// only wake a direction early; it then simply waits again.
			if d != nil && d.state.CompareAndSwap(parked, running) {
				go d.run()
			}
		}
	}
}

package relay

import (
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const canPeek = true

// wait blocks until the connection has data, an end of stream or an error
// to report. If it would have to block, it calls release first, so no
// buffer is held while the tunnel is idle. When nothing arrives for
// parkAfter (if not zero) it returns idle = true so the caller can park.
// It returns the socket error the peek consumed (a reset, say): the kernel
// reports it only once, so the read that follows would see a plain end of
// stream instead.
func (w *waiter) wait(release func(), parkAfter time.Duration) (idle bool, err error) {
	if w.rc == nil {
		return false, nil
	}
	var sockErr error
	armed, polled := false, false
	rerr := w.rc.Read(func(fd uintptr) bool {
		if polled {
			// Called again after the poller said readable: trust it and
			// let the read find out (it does not block: a stale wake-up
			// brings the direction back here).
			return true
		}
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&w.peek[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK {
			release()
			if parkAfter > 0 && !armed && parker() != nil {
				armed = true
				w.conn.SetReadDeadline(time.Now().Add(parkAfter))
			}
			polled = true
			return false // wait in the poller until readable (or the deadline)
		}
		if errno != 0 && errno != syscall.EINTR {
			sockErr = os.NewSyscallError("recvfrom", errno)
		}
		return true // data or EOF: the read will tell
	})
	if armed {
		w.conn.SetReadDeadline(time.Time{})
	}
	if rerr != nil && isDeadline(rerr) {
		return true, nil
	}
	return false, sockErr
}

// tryRead reads what the socket has at hand without blocking; ok is false
// when it has nothing (the caller waits instead). An end of stream is
// io.EOF.
func (w *waiter) tryRead(p []byte) (n int, err error, ok bool) {
	var errno error
	rerr := w.rc.Read(func(fd uintptr) bool {
		for {
			n, errno = unix.Read(int(fd), p)
			if errno != unix.EINTR {
				return true
			}
		}
	})
	switch {
	case rerr != nil:
		return 0, rerr, true
	case errno == unix.EAGAIN:
		return 0, nil, false
	case errno != nil:
		return 0, os.NewSyscallError("read", errno), true
	case n == 0:
		return 0, io.EOF, true
	}
	return n, nil, true
}

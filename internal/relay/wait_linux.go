package relay

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawReads: sockets are read and waited on through their raw descriptors
// (tryRead, wait), so reads never block.
const rawReads = true

// wait blocks until the connection is readable (or has an end of stream
// or an error to report), holding no buffer: the caller has just found the
// socket empty (a read had nothing) and released its buffer. When nothing
// arrives for parkAfter (if not zero) it returns idle = true so the caller
// can park. A wake-up may be stale (the poller is edge-triggered): the
// read that follows never blocks, and brings the direction back here.
func (w *waiter) wait(conn net.Conn, parkAfter time.Duration) (idle bool) {
	if w.rc == nil {
		return false
	}
	armed := false
	if parkAfter > 0 && parker() != nil {
		armed = true
		conn.SetReadDeadline(time.Now().Add(parkAfter))
	}
	w.mode = rawWait
	rerr := w.rc.Read(w.fn)
	w.mode = rawRead
	if armed {
		conn.SetReadDeadline(time.Time{})
	}
	return rerr != nil && isDeadline(rerr)
}

// tryRead reads what the socket has at hand without blocking; ok is false
// when it has nothing (the caller waits instead). An end of stream is
// io.EOF.
func (w *waiter) tryRead(p []byte) (n int, err error, ok bool) {
	w.p = p
	rerr := w.rc.Read(w.fn)
	n, errno := w.n, w.errno
	w.p, w.errno = nil, 0 // hold no buffer between calls
	switch {
	case rerr != nil:
		return 0, rerr, true
	case errno == unix.EAGAIN:
		return 0, nil, false
	case errno != 0:
		return 0, os.NewSyscallError("read", errno), true
	case n == 0:
		return 0, io.EOF, true
	}
	return n, nil, true
}

// raw is the waiter's function for its RawConn's Read, bound once (fn):
// in rawWait mode it reports "not ready" once, so Read waits in the poller
// until the socket is readable (or the deadline), then "done"; in rawRead
// mode it reads p without blocking.
//
// Before it waits it looks at the socket (a one-byte MSG_PEEK): the
// poller is edge-triggered and Read begins by forgetting any readiness it
// saw before (poll.FD.RawRead resets it), so bytes, an end of stream or an
// error that arrived after the caller's last read found nothing would
// otherwise wake nobody — the direction would sleep until its park
// deadline, or for good with parking off. Anything to report ends the
// wait at once; what arrives after the look raises a new edge.
func (w *waiter) raw(fd uintptr) bool {
	switch w.mode {
	case rawWait:
		w.mode = rawWaited
		for {
			// recvfrom(2) without a source address: nothing to allocate.
			_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&w.peek[0])), 1,
				unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
			switch errno {
			case unix.EINTR:
				continue
			case unix.EAGAIN, unix.ENOTSOCK:
				return false // nothing yet (or not a socket): wait
			}
			return true // bytes, an end of stream or an error: no wait
		}
	case rawWaited:
		return true
	}
	for {
		var err error
		w.n, err = unix.Read(int(fd), w.p)
		w.errno, _ = err.(syscall.Errno) // unix.Read fails with an Errno only
		if w.errno != unix.EINTR {
			return true
		}
	}
}

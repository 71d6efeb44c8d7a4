package relay

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const canPeek = true

// wait blocks until the connection has data, an end of stream or an error
// to report. If it would have to block, it calls release first, so no
// buffer is held while the tunnel is idle. It reports false when it could
// not wait (the caller's read then blocks as usual).
func (w *waiter) wait(release func()) bool {
	if w.rc == nil {
		return false
	}
	err := w.rc.Read(func(fd uintptr) bool {
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&w.peek[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK {
			release()
			return false // park in the poller until readable
		}
		return true // data, EOF or an error: the read will tell
	})
	return err == nil
}

package relay

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const canPeek = true

// wait blocks until the connection has data, an end of stream or an error
// to report. If it would have to block, it calls release first, so no
// buffer is held while the tunnel is idle. It returns the socket error the
// peek consumed (a reset, say): the kernel reports it only once, so the read
// that follows would see a plain end of stream instead.
func (w *waiter) wait(release func()) error {
	if w.rc == nil {
		return nil
	}
	var sockErr error
	w.rc.Read(func(fd uintptr) bool {
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&w.peek[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK {
			release()
			return false // park in the poller until readable
		}
		if errno != 0 && errno != syscall.EINTR {
			sockErr = os.NewSyscallError("recvfrom", errno)
		}
		return true // data or EOF: the read will tell
	})
	return sockErr
}

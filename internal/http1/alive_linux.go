package http1

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Alive reports whether an idle connection can carry a request: nothing
// (no data, no end of stream, no error) is waiting on its socket. It costs
// one non-blocking peek.
func Alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		for {
			_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
				unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
			if errno == syscall.EINTR {
				continue
			}
			ok = errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK
			return true
		}
	})
	return err == nil && ok
}

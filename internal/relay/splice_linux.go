package relay

import (
	"errors"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Splicing. A direction that keeps filling its largest buffer moves a
// bulk transfer: from then on it moves bytes with splice(2) through a pipe
// of its own, socket to pipe to socket, without copying them through user
// memory — the CPU a gigabyte costs falls to what the kernel's copies
// cost (half of read/write's, measured with proxybench). Small exchanges
// stay on read/write: a splice costs two system calls per chunk too, and
// a pipe two descriptors. A burst ends when the source has nothing more
// at hand; the pipe, empty, goes back to a small free list, so an idle
// tunnel holds no pipe.

const (
	canSplice = true
	// pipeSize is asked for every pipe (the default limit for an
	// unprivileged process is 1 MiB, /proc/sys/fs/pipe-max-size).
	pipeSize = 1 << 20
	// maxFreePipes bounds the pipes kept for the next burst.
	maxFreePipes = 32
)

// errNoSplice says splice(2) does not work between these sockets: the
// direction goes back to read/write for good.
var errNoSplice = errors.New("relay: splice not supported")

type pipe struct {
	r, w int
	size int // capacity
	n    int // bytes in it
}

var pipes struct {
	mu   sync.Mutex
	free []*pipe
}

func getPipe() (*pipe, error) {
	pipes.mu.Lock()
	if n := len(pipes.free); n > 0 {
		p := pipes.free[n-1]
		pipes.free = pipes.free[:n-1]
		pipes.mu.Unlock()
		return p, nil
	}
	pipes.mu.Unlock()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	p := &pipe{r: fds[0], w: fds[1], size: 64 << 10}
	if n, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, pipeSize); err == nil {
		p.size = n
	}
	return p, nil
}

// putPipe keeps an empty pipe for the next burst, or closes it.
func putPipe(p *pipe) {
	if p.n == 0 {
		pipes.mu.Lock()
		if len(pipes.free) < maxFreePipes {
			pipes.free = append(pipes.free, p)
			pipes.mu.Unlock()
			return
		}
		pipes.mu.Unlock()
	}
	unix.Close(p.r)
	unix.Close(p.w)
}

// discard closes the splicer's pipe, whatever it holds (a direction that
// panicked: its count of bytes in the pipe is not to be trusted).
func (s *splicer) discard() {
	if s.p != nil {
		unix.Close(s.p.r)
		unix.Close(s.p.w)
		s.p = nil
	}
}

// splicer moves a direction's source → destination through a pipe it
// holds while a burst lasts; the two RawConns are the directions' waiters'.
type splicer struct {
	p *pipe
}

// move splices what the source has at hand into the destination. It
// returns the bytes moved — 0 with eof false when the source has nothing
// now (the caller waits) — and eof when the source ended its stream.
func (s *splicer) move(src, dst syscall.RawConn) (n int64, eof bool, err error) {
	if s.p == nil {
		if s.p, err = getPipe(); err != nil {
			return 0, false, err
		}
	}
	p := s.p
	var in int64
	var inErr error
	rerr := src.Read(func(fd uintptr) bool {
		for {
			in, inErr = unix.Splice(int(fd), nil, p.w, nil, p.size-p.n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if inErr != unix.EINTR {
				return true // never wait here: the caller's waiter does
			}
		}
	})
	switch {
	case rerr != nil:
		return 0, false, rerr
	case inErr == unix.EAGAIN:
		return 0, false, nil
	case inErr == unix.EINVAL:
		return 0, false, errNoSplice
	case inErr != nil:
		return 0, false, os.NewSyscallError("splice", inErr)
	case in == 0:
		return 0, true, nil
	}
	p.n += int(in)
	for p.n > 0 {
		var out int64
		var outErr error
		werr := dst.Write(func(fd uintptr) bool {
			out, outErr = unix.Splice(p.r, nil, int(fd), nil, p.n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			return outErr != unix.EAGAIN // full: wait until writable
		})
		if werr == nil && outErr != nil && outErr != unix.EINTR {
			werr = os.NewSyscallError("splice", outErr)
		}
		if werr != nil {
			return n, false, werr // p.n > 0: the pipe is closed, not kept
		}
		p.n -= int(out)
		n += out
	}
	return n, false, nil
}

// done gives the pipe back (or closes it when it still holds bytes).
func (s *splicer) done() {
	if s.p != nil {
		putPipe(s.p)
		s.p = nil
	}
}

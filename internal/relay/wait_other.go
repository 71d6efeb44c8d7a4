//go:build !linux

package relay

import (
	"net"
	"syscall"
	"time"
)

const rawReads = false

func (w *waiter) wait(net.Conn, time.Duration) bool { return false }

func (w *waiter) raw(uintptr) bool { return true }

type parkResult int

const (
	parkedOK parkResult = iota
	parkFailed
	parkLost
)

func park(d *direction) parkResult { return parkFailed }
func forget(d *direction)          {}
func parker() *struct{}            { return nil }

var _ = (*direction).release

const canSplice = false

var errNoSplice error

type splicer struct{}

func (s *splicer) move(src, dst syscall.RawConn) (n int64, eof bool, err error) {
	return 0, false, nil
}
func (s *splicer) done()    {}
func (s *splicer) discard() {}

func (w *waiter) tryRead(p []byte) (int, error, bool) { return 0, nil, false }

// Detaching is Linux's (detach_linux.go).
var Detach = false

func (d *direction) attach() bool { return !d.t.closed.Load() }
func (t *Tunnel) closeDetached()  {}

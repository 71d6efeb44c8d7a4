//go:build !linux

package relay

import "time"

const canPeek = false

func (w *waiter) wait(release func(), parkAfter time.Duration) (bool, error) { return false, nil }

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

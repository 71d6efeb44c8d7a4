//go:build !linux

package relay

const canPeek = false

func (w *waiter) wait(release func()) error { return nil }

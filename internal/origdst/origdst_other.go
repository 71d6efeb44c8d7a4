//go:build !linux

package origdst

import (
	"net/netip"
	"syscall"
)

func lookup(syscall.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, ErrUnsupported
}

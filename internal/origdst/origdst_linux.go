//go:build linux

package origdst

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST from
// linux/netfilter_ipv6/ip6_tables.h (same value as SO_ORIGINAL_DST, but at
// level SOL_IPV6); golang.org/x/sys/unix does not name it.
const ip6tSOOriginalDst = 80

func lookup(c syscall.Conn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	var ap netip.AddrPort
	var lerr error
	if err := rc.Control(func(fd uintptr) { ap, lerr = lookupFD(int(fd)) }); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	return ap, lerr
}

func lookupFD(fd int) (netip.AddrPort, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: getsockname: %w", err)
	}
	var order []func(int) (netip.AddrPort, error)
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		order = append(order, ipv4)
	case *unix.SockaddrInet6:
		// A v4-mapped address on a dual-stack socket is tracked as IPv4.
		if netip.AddrFrom16(sa.Addr).Is4In6() {
			order = append(order, ipv4, ipv6)
		} else {
			order = append(order, ipv6)
		}
	default:
		return netip.AddrPort{}, fmt.Errorf("original destination: not an IP socket (%T)", sa)
	}
	var first error
	for _, f := range order {
		ap, err := f(fd)
		if err == nil {
			return ap, nil
		}
		if first == nil {
			first = err
		}
	}
	return netip.AddrPort{}, first
}

func ipv4(fd int) (netip.AddrPort, error) {
	var raw unix.RawSockaddrInet4
	size := uint32(unsafe.Sizeof(raw))
	if err := getsockopt(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST, unsafe.Pointer(&raw), &size); err != nil {
		return netip.AddrPort{}, wrap("SO_ORIGINAL_DST", err)
	}
	if raw.Family != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("original destination: SO_ORIGINAL_DST returned family %d", raw.Family)
	}
	return netip.AddrPortFrom(netip.AddrFrom4(raw.Addr), ntohs(raw.Port)), nil
}

func ipv6(fd int) (netip.AddrPort, error) {
	var raw unix.RawSockaddrInet6
	size := uint32(unsafe.Sizeof(raw))
	if err := getsockopt(fd, unix.SOL_IPV6, ip6tSOOriginalDst, unsafe.Pointer(&raw), &size); err != nil {
		return netip.AddrPort{}, wrap("IP6T_SO_ORIGINAL_DST", err)
	}
	if raw.Family != unix.AF_INET6 {
		return netip.AddrPort{}, fmt.Errorf("original destination: IP6T_SO_ORIGINAL_DST returned family %d", raw.Family)
	}
	addr := netip.AddrFrom16(raw.Addr).Unmap()
	if raw.Scope_id != 0 && addr.Is6() {
		addr = addr.WithZone(strconv.FormatUint(uint64(raw.Scope_id), 10))
	}
	return netip.AddrPortFrom(addr, ntohs(raw.Port)), nil
}

func getsockopt(fd, level, name int, val unsafe.Pointer, size *uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(val), uintptr(unsafe.Pointer(size)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func wrap(opt string, err error) error {
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w (%s: %v)", ErrNotTracked, opt, err)
	}
	return fmt.Errorf("original destination: %s: %w", opt, err)
}

// ntohs turns a port as stored in a sockaddr (network byte order) into a
// number.
func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

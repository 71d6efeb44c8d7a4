package proxy

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// rawListeners tracks the listeners that are not HTTP servers (transparent,
// SOCKS5), their connections until each becomes a tunnel (or fails), and
// every address the proxy listens on, for the transparent loop guard. The
// zero value is ready to use.
type rawListeners struct {
	mu     sync.Mutex
	closed bool
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]context.CancelFunc
	self   []netip.AddrPort // every listener address of this proxy
	tports []uint16         // ports of the transparent listeners
}

// add registers ln; false after close.
func (l *rawListeners) add(ln net.Listener) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	if l.lns == nil {
		l.lns = map[net.Listener]struct{}{}
	}
	l.lns[ln] = struct{}{}
	return true
}

func (l *rawListeners) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// track registers a connection in its handshake; false after close.
func (l *rawListeners) track(c net.Conn, cancel context.CancelFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	if l.conns == nil {
		l.conns = map[net.Conn]context.CancelFunc{}
	}
	l.conns[c] = cancel
	return true
}

func (l *rawListeners) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// active returns the number of connections still in their handshake.
func (l *rawListeners) active() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// close stops accepting: it closes every listener. Handshakes in progress
// go on.
func (l *rawListeners) close() {
	l.mu.Lock()
	l.closed = true
	lns := make([]net.Listener, 0, len(l.lns))
	for ln := range l.lns {
		lns = append(lns, ln)
	}
	l.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
}

// abort cuts off every handshake in progress.
func (l *rawListeners) abort() {
	l.mu.Lock()
	conns := make(map[net.Conn]context.CancelFunc, len(l.conns))
	for c, cancel := range l.conns {
		conns[c] = cancel
	}
	l.mu.Unlock()
	for c, cancel := range conns {
		cancel()
		c.Close()
	}
}

func (l *rawListeners) noteSelf(a netip.AddrPort) {
	l.mu.Lock()
	if !slices.Contains(l.self, a) {
		l.self = append(l.self, a)
	}
	l.mu.Unlock()
}

func (l *rawListeners) noteTransparentPort(p uint16) {
	l.mu.Lock()
	if !slices.Contains(l.tports, p) {
		l.tports = append(l.tports, p)
	}
	l.mu.Unlock()
}

// isSelf reports whether a is one of the proxy's own listeners: a listener
// address, a wildcard listener's port on a local address, or a transparent
// listener's port on a local address.
func (l *rawListeners) isSelf(a netip.AddrPort) bool {
	l.mu.Lock()
	self, tports := l.self, l.tports
	l.mu.Unlock()
	ip := a.Addr().WithZone("").Unmap()
	local := func() bool { return isLocalAddr(ip) }
	for _, sa := range self {
		if sa.Port() != a.Port() {
			continue
		}
		if sa.Addr() == ip || (sa.Addr().IsUnspecified() && local()) {
			return true
		}
	}
	return slices.Contains(tports, a.Port()) && local()
}

// isLocalAddr reports whether ip is an address of this host (network
// namespace): loopback, unspecified, or assigned to an interface.
func isLocalAddr(ip netip.Addr) bool {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if pn, ok := a.(*net.IPNet); ok {
			if ia, ok := netip.AddrFromSlice(pn.IP); ok && ia.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// NoteListener records addr as one of the proxy's own addresses for the
// transparent listener's loop guard. Serve, ServeTransparent and ServeSOCKS
// record their listeners themselves; Run adds the admin listener.
func (s *Server) NoteListener(addr net.Addr) {
	if a, ok := addrPort(addr); ok {
		s.raw.noteSelf(a)
	}
}

package proxyd

import (
	"context"
	"log/slog"
	"net"
	"net/netip"

	"egret.io/egret/internal/config"
)

// listenTCP listens like net.Listen, but without TCP keep-alive probes on
// loopback listeners: a sidecar's clients are in the same pod, so the probes
// would only cost four system calls per accepted connection. Listeners on
// other addresses (a gateway) keep Go's default probes, which find clients
// that vanished behind a NAT.
func listenTCP(network, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	if config.LoopbackListen(addr) {
		lc.KeepAlive = -1
	}
	return lc.Listen(context.Background(), network, addr)
}

// listenTransparent opens the transparent listener on addr. A loopback
// address (127.0.0.1, ::1 or localhost) opens both 127.0.0.1:port and
// [::1]:port, because iptables REDIRECT delivers IPv4 connections to
// 127.0.0.1 and ip6tables to ::1; the IPv6 one is skipped, with a log
// line, where the namespace has no IPv6 loopback. Other addresses open
// one listener.
func listenTransparent(listen func(network, addr string) (net.Listener, error), addr string, log *slog.Logger) ([]net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if !config.LoopbackListen(addr) {
		ln, err := listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		return []net.Listener{ln}, nil
	}
	first, second := "127.0.0.1", "::1"
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		first, second = "::1", "127.0.0.1"
	}
	ln, err := listen("tcp", net.JoinHostPort(first, port))
	if err != nil {
		return nil, err
	}
	_, port, _ = net.SplitHostPort(ln.Addr().String()) // port 0 became a real one
	ln2, err := listen("tcp", net.JoinHostPort(second, port))
	if err != nil {
		log.Info("transparent listener: only "+ln.Addr().String()+"; redirected connections of the other IP family cannot arrive",
			"addr", net.JoinHostPort(second, port), "error", err.Error())
		return []net.Listener{ln}, nil
	}
	return []net.Listener{ln, ln2}, nil
}

package iptables

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"egret.io/egret/internal/origdst"
)

// DefaultProbeTimeout bounds each probe connection.
const DefaultProbeTimeout = 3 * time.Second

// ErrNotRedirected is wrapped by Probe.Run's error when a probe connection
// did not arrive at the redirect port: the rules do not work.
var ErrNotRedirected = errors.New("connection was not redirected")

// Probe checks that the rules really redirect: it listens on the redirect
// port itself (in an init container the proxy is not running yet), connects
// to each target as the current (non-proxy) user, and expects the
// connection to arrive at its listener with the target as the original
// destination.
type Probe struct {
	// RedirectPort is the port the rules REDIRECT to. The probe listens on
	// 127.0.0.1 (IPv4 targets) and ::1 (IPv6 targets), where the kernel
	// delivers locally REDIRECTed connections; the port must be free.
	RedirectPort uint16
	// Targets are addresses that the rules must redirect. Nothing is sent
	// to them when the redirect works.
	Targets []netip.AddrPort
	// Timeout bounds each target's probe. Zero means DefaultProbeTimeout.
	Timeout time.Duration
	// Listen opens the probe listener. Nil means net.Listen.
	Listen func(network, address string) (net.Listener, error)
	// Dial connects to a target. Nil means a net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// DefaultProbeTargets returns a probe address per family of c that the
// rules must redirect: an address from the documentation ranges
// (192.0.2.1, 2001:db8::1), or inside the first included CIDR when
// include-cidrs are set, on the first non-excluded port of 80, 443, 8080, 9.
func DefaultProbeTargets(c Config) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, fam := range c.Families() {
		var candidates []netip.Addr
		if len(c.IncludeCIDRs) > 0 {
			for _, p := range c.IncludeCIDRs {
				if fam.contains(p.Addr()) {
					a := p.Addr()
					if p.Bits() < a.BitLen() && a.Next().IsValid() {
						a = a.Next()
					}
					candidates = append(candidates, a)
				}
			}
		} else if fam == IPv4 {
			candidates = append(candidates, netip.MustParseAddr("192.0.2.1"))
		} else {
			candidates = append(candidates, netip.MustParseAddr("2001:db8::1"))
		}
		found := false
		for _, a := range candidates {
			for _, port := range []uint16{80, 443, 8080, 9} {
				if ap := netip.AddrPortFrom(a, port); c.Redirected(ap) {
					out, found = append(out, ap), true
					break
				}
			}
			if found {
				break
			}
		}
		if !found && len(c.IncludeCIDRs) == 0 {
			return nil, fmt.Errorf("no default %s probe address is redirected by these rules; pass --probe-addr", fam)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no default probe address is redirected by these rules; pass --probe-addr")
	}
	return out, nil
}

// Run probes every target and returns the first failure. A failure of the
// rules wraps ErrNotRedirected; other errors (the port is busy) do not.
func (p Probe) Run(ctx context.Context) error {
	if len(p.Targets) == 0 {
		return errors.New("probe: no targets")
	}
	for _, t := range p.Targets {
		if err := p.one(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

type arrival struct {
	token []byte
	orig  netip.AddrPort
	err   error
}

func (p Probe) one(ctx context.Context, target netip.AddrPort) error {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	listen, dial := p.Listen, p.Dial
	if listen == nil {
		listen = net.Listen
	}
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	network, host := "tcp4", "127.0.0.1"
	if target.Addr().Unmap().Is6() {
		network, host = "tcp6", "::1"
	}
	laddr := net.JoinHostPort(host, strconv.Itoa(int(p.RedirectPort)))
	ln, err := listen(network, laddr)
	if err != nil {
		return fmt.Errorf("probe: listen on %s (the redirect port must be free: run before the proxy starts): %w", laddr, err)
	}
	defer ln.Close()

	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	token = []byte(hex.EncodeToString(token))
	arrivals := make(chan arrival, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(timeout))
				buf := make([]byte, len(token))
				_, err := io.ReadFull(c, buf)
				a := arrival{token: buf, err: err}
				if err == nil {
					a.orig, a.err = origdst.Lookup(c.(*net.TCPConn))
				}
				select { // before the ack: a client that reads "ok" finds its arrival
				case arrivals <- a:
				default:
				}
				if err == nil {
					c.Write([]byte(probeAck))
				}
			}()
		}
	}()

	fail := func(format string, args ...any) error {
		return fmt.Errorf("probe %s: %w: %s", target, ErrNotRedirected, fmt.Sprintf(format, args...))
	}
	c, err := dial(ctx, network, target.String())
	if err != nil {
		return fail("dial: %v", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write(token); err != nil {
		return fail("write: %v", err)
	}
	acks := make(chan string, 1)
	go func() {
		buf := make([]byte, len(probeAck))
		n, err := io.ReadFull(c, buf)
		if err != nil {
			acks <- fmt.Sprintf("the peer that accepted sent %q then: %v", buf[:n], err)
			return
		}
		acks <- string(buf)
	}()
	check := func(a arrival) (bool, error) {
		if !bytes.Equal(a.token, token) {
			return false, nil // someone else's connection
		}
		if a.err != nil {
			return true, fail("arrived at %s but the original destination is unknown: %v", laddr, a.err)
		}
		if a.orig.Addr().Unmap() != target.Addr().Unmap() || a.orig.Port() != target.Port() {
			return true, fail("arrived at %s with original destination %s", laddr, a.orig)
		}
		return true, nil
	}
	for {
		select {
		case a := <-arrivals:
			if done, err := check(a); done {
				return err
			}
		case ack := <-acks:
			for { // our listener queued the arrival before acknowledging
				select {
				case a := <-arrivals:
					if done, err := check(a); done {
						return err
					}
					continue
				default:
				}
				break
			}
			if ack == probeAck {
				return fail("acknowledged, but no arrival was recorded at %s", laddr)
			}
			return fail("the connection reached something other than egret's probe listener on %s: %s", laddr, ack)
		case <-ctx.Done():
			return fail("nothing arrived at %s within %s (the peer that accepted is not egret's probe)", laddr, timeout)
		}
	}
}

// probeAck is what the probe listener answers after reading the token.
const probeAck = "ok"

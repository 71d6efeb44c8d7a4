package iptables

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestProbeWithoutRedirect runs the probe on loopback where no rule
// redirects anything: a target that answers something else fails fast, a
// busy redirect port is an error that is not ErrNotRedirected.
func TestProbeWithoutRedirect(t *testing.T) {
	other, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-not-egret\r\n"))
			c.Close()
		}
	}()
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, _ := net.Listen("tcp4", "127.0.0.1:0")
	freePort := uint16(free.Addr().(*net.TCPAddr).Port)
	free.Close()
	target := netip.MustParseAddrPort(other.Addr().String())

	t.Run("answered-by-someone-else", func(t *testing.T) {
		start := time.Now()
		err := Probe{RedirectPort: freePort, Targets: []netip.AddrPort{target}, Timeout: 5 * time.Second}.Run(context.Background())
		if !errors.Is(err, ErrNotRedirected) || !strings.Contains(err.Error(), "something other than egret") {
			t.Fatalf("err = %v", err)
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("took %s; should fail as soon as the peer answers", time.Since(start))
		}
	})
	t.Run("busy-port", func(t *testing.T) {
		err := Probe{RedirectPort: uint16(busy.Addr().(*net.TCPAddr).Port), Targets: []netip.AddrPort{target}}.Run(context.Background())
		if err == nil || errors.Is(err, ErrNotRedirected) || !strings.Contains(err.Error(), "must be free") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no-targets", func(t *testing.T) {
		if err := (Probe{RedirectPort: freePort}).Run(context.Background()); err == nil {
			t.Fatal("probe without targets succeeded")
		}
	})
}

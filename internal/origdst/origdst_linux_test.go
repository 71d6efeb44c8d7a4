//go:build linux

package origdst_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"egret.io/egret/internal/origdst"
	"egret.io/egret/internal/testutil/netns"
)

// TestLookupRedirected redirects connections to an address of another
// namespace onto a local listener with a plain iptables/ip6tables REDIRECT
// rule and checks that Lookup recovers the address the client dialled.
func TestLookupRedirected(t *testing.T) {
	netns.Require(t, "iptables", "ip6tables")
	pod, outside := netns.New(t, "od-pod"), netns.New(t, "od-out")
	netns.Link(t, pod, outside, []string{"10.251.0.1/24", "fd00:e9e7:1::1/64"}, []string{"10.251.0.2/24", "fd00:e9e7:1::2/64"})

	tests := []struct {
		name   string
		listen string // listener inside pod
		tool   string
		target string // address the client dials, redirected to the listener
	}{
		{"ipv4", "127.0.0.1:0", "iptables", "10.251.0.2:80"},
		{"ipv4-other-port", "127.0.0.1:0", "iptables", "10.251.0.77:8443"},
		{"ipv6", "[::1]:0", "ip6tables", "[fd00:e9e7:1::2]:443"},
		{"ipv4-on-dual-stack-listener", "[::]:0", "iptables", "10.251.0.9:5432"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := pod.Listen("tcp", tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			target := netip.MustParseAddrPort(tc.target)
			rule := []string{"OUTPUT", "-p", "tcp", "-d", target.Addr().String(),
				"--dport", strconv.Itoa(int(target.Port())), "-j", "REDIRECT", "--to-ports", port}
			pod.Run(t, append([]string{tc.tool, "-w", "-t", "nat", "-A"}, rule...)...)
			defer pod.Run(t, append([]string{tc.tool, "-w", "-t", "nat", "-D"}, rule...)...)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := pod.Dial(ctx, "tcp", tc.target)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			srv, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			got, err := origdst.Lookup(srv.(*net.TCPConn))
			if err != nil {
				t.Fatal(err)
			}
			if got != target {
				t.Fatalf("Lookup = %s, want %s (local %s)", got, target, srv.LocalAddr())
			}
		})
	}
}

// TestLookupNotRedirected checks the answer for a connection no NAT rule
// touched: either "not tracked" or the connection's own local address, which
// is what the proxy's loop guard compares against.
func TestLookupNotRedirected(t *testing.T) {
	pod := netns.New(t, "od-plain")
	ln, err := pod.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := pod.Dial(context.Background(), "tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	got, err := origdst.Lookup(srv.(*net.TCPConn))
	switch {
	case errors.Is(err, origdst.ErrNotTracked):
	case err != nil:
		t.Fatalf("Lookup: %v", err)
	case got.String() != srv.LocalAddr().String():
		t.Fatalf("Lookup = %s, want the local address %s", got, srv.LocalAddr())
	}
}

func TestLookupNotIP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := origdst.Lookup(c.(*net.UnixConn)); err == nil {
		t.Fatal("Lookup on a unix socket succeeded")
	}
}

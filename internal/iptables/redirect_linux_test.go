//go:build linux

package iptables_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/iptables"
	"egret.io/egret/internal/origdst"
	"egret.io/egret/internal/testutil/netns"
)

// serveHTTP answers every request on ln with one line made by body(conn).
func serveHTTP(ln net.Listener, body func(net.Conn) string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				return
			}
			b := body(c) + "\n"
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(b), b)
		}()
	}
}

// TestRedirect is the real thing: a "pod" namespace with a veth to an
// "outside" namespace, egret's rules applied in the pod, a listener on the
// redirect port in the pod, and curl run as other users. An ordinary user's
// connection to the outside arrives at the listener, which recovers the
// original destination (IPv4 and IPv6); the proxy's UID and an excluded
// address reach the outside directly; the validation probe passes with the
// rules and fails without them.
func TestRedirect(t *testing.T) {
	for _, b := range backends {
		t.Run(b.String(), func(t *testing.T) {
			requireIptables(t, b, iptables.IPv4, iptables.IPv6)
			netns.Require(t, "curl", "setpriv")
			testRedirect(t, b)
		})
	}
}

func testRedirect(t *testing.T, b iptables.Backend) {
	pod, outside := netns.New(t, "pod"), netns.New(t, "outside")
	netns.Link(t, pod, outside,
		[]string{"10.252.0.1/24", "fd00:e9e7:2::1/64"},
		[]string{"10.252.0.2/24", "10.252.0.3/24", "fd00:e9e7:2::2/64"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The outside: one HTTP server on all its addresses.
	out, err := outside.Listen("tcp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	go serveHTTP(out, func(c net.Conn) string { return "outside " + c.LocalAddr().String() })
	outPort := uint16(out.Addr().(*net.TCPAddr).Port)

	// The redirect port: a port that is free in the pod.
	probe, err := pod.Listen("tcp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	redirectPort := probe.Addr().(*net.TCPAddr).Port
	probe.Close()

	c, err := iptables.Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: redirectPort, IPv6: true,
		ExcludeCIDRs: []string{"10.252.0.3"}}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	m := &iptables.Manager{Runner: runner(pod), Backend: b}
	if _, err := m.Apply(ctx, c); err != nil {
		t.Fatal(err)
	}

	validate := iptables.Probe{
		RedirectPort: uint16(redirectPort),
		Targets: []netip.AddrPort{
			netip.AddrPortFrom(netip.MustParseAddr("10.252.0.2"), outPort),
			netip.AddrPortFrom(netip.MustParseAddr("fd00:e9e7:2::2"), outPort),
		},
		Timeout: 2 * time.Second,
		Listen:  pod.Listen,
		Dial:    pod.Dial,
	}
	t.Run("validation-passes-with-rules", func(t *testing.T) {
		if err := validate.Run(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("validation-rejects-excluded-target", func(t *testing.T) {
		p := validate
		p.Targets = []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("10.252.0.3"), outPort)}
		if err := p.Run(ctx); !errors.Is(err, iptables.ErrNotRedirected) {
			t.Fatalf("probe of an excluded address: %v, want ErrNotRedirected", err)
		}
	})

	// The transparent listener stand-in: answers with the original
	// destination it recovered.
	ln, err := pod.Listen("tcp", net.JoinHostPort("::", strconv.Itoa(redirectPort)))
	if err != nil {
		t.Fatal(err)
	}
	go serveHTTP(ln, func(c net.Conn) string {
		orig, err := origdst.Lookup(c.(*net.TCPConn))
		if err != nil {
			return "redirected, original destination unknown: " + err.Error()
		}
		return "redirected " + orig.String()
	})

	curl := func(uid int, url string) string {
		t.Helper()
		cmd := pod.CommandAs(ctx, uid, uid, "curl", "-sS", "--noproxy", "*", "--max-time", "10", url)
		body, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("curl %s as %d: %v: %s", url, uid, err, ee.Stderr)
			}
			t.Fatalf("curl %s as %d: %v", url, uid, err)
		}
		return strings.TrimSpace(string(body))
	}
	for _, tc := range []struct {
		name string
		uid  int
		dst  string
		want string
	}{
		{"app-ipv4-is-redirected", 1000, "10.252.0.2", "redirected 10.252.0.2:%d"},
		{"app-ipv6-is-redirected", 1000, "fd00:e9e7:2::2", "redirected [fd00:e9e7:2::2]:%d"},
		{"proxy-uid-goes-direct", 1337, "10.252.0.2", "outside 10.252.0.2:%d"},
		{"proxy-uid-ipv6-goes-direct", 1337, "fd00:e9e7:2::2", "outside [fd00:e9e7:2::2]:%d"},
		{"excluded-cidr-goes-direct", 1000, "10.252.0.3", "outside 10.252.0.3:%d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := "http://" + net.JoinHostPort(tc.dst, strconv.Itoa(int(outPort))) + "/"
			if got, want := curl(tc.uid, url), fmt.Sprintf(tc.want, outPort); got != want {
				t.Fatalf("curl %s as uid %d: %q, want %q", url, tc.uid, got, want)
			}
		})
	}
	ln.Close()

	if _, err := m.Remove(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Run("validation-fails-without-rules", func(t *testing.T) {
		err := validate.Run(ctx)
		if !errors.Is(err, iptables.ErrNotRedirected) {
			t.Fatalf("probe without rules: %v, want ErrNotRedirected", err)
		}
		t.Log(err)
	})
	t.Run("app-goes-direct-without-rules", func(t *testing.T) {
		url := "http://" + net.JoinHostPort("10.252.0.2", strconv.Itoa(int(outPort))) + "/"
		if got, want := curl(1000, url), fmt.Sprintf("outside 10.252.0.2:%d", outPort); got != want {
			t.Fatalf("%q, want %q", got, want)
		}
	})
}

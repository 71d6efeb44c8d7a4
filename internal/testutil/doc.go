// Package testutil holds helpers for egret's tests; its subpackages start
// real programs (Squid, network namespaces, an API server). Only tests
// import it.
package testutil

import (
	"net"
	"os"
	"os/exec"
	"testing"
)

// RequireAll reports whether a missing external tool must fail the test
// instead of skipping it: set by `make test` (CI) through EGRET_REQUIRE_ALL=1.
func RequireAll() bool { return os.Getenv("EGRET_REQUIRE_ALL") == "1" }

// NeedTool returns the path of an external program, or skips the test
// (fails it under EGRET_REQUIRE_ALL=1) when it is not installed.
func NeedTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name+" is not installed (scripts/deps installs it)")
	}
	return p
}

// Missing skips or, under EGRET_REQUIRE_ALL=1, fails the test.
func Missing(t testing.TB, why string) {
	t.Helper()
	if RequireAll() {
		t.Fatalf("required by EGRET_REQUIRE_ALL=1: %s", why)
	}
	t.Skip(why)
}

// NeedRoot skips (or fails under EGRET_REQUIRE_ALL=1) unless running as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root (network namespaces, iptables)")
	}
}

// Serve accepts connections on ln until the test ends and runs fn for each
// in its own goroutine, closing the connection when fn returns.
func Serve(t testing.TB, ln net.Listener, fn func(net.Conn)) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fn(c)
			}()
		}
	}()
}

// TCPServer listens on a free loopback port, serves it with fn (see Serve)
// and returns its address.
func TCPServer(t testing.TB, fn func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, ln, fn)
	return ln.Addr().String()
}

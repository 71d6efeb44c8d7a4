//go:build linux

package netns

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestLinkAndSockets proves the harness end to end: two namespaces joined by
// a veth, a listener opened from the test process inside one, a dial from
// the other, and a command run as another UID inside a namespace.
func TestLinkAndSockets(t *testing.T) {
	Require(t, "setpriv")
	pod, outside := New(t, "pod"), New(t, "outside")
	podIf, _ := Link(t, pod, outside, []string{"10.250.0.1/30", "fd00:e9e7::1/64"}, []string{"10.250.0.2/30", "fd00:e9e7::2/64"})
	if !strings.Contains(pod.Run(t, "ip", "-o", "link"), podIf) {
		t.Fatalf("interface %s not in %s", podIf, pod.Name)
	}
	for _, tc := range []struct{ name, network, listen, dial string }{
		{"ipv4", "tcp4", "10.250.0.2:0", "10.250.0.2"},
		{"ipv6", "tcp6", "[fd00:e9e7::2]:0", "fd00:e9e7::2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := outside.Listen(tc.network, tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, c.RemoteAddr().String())
				c.Close()
			}()
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := pod.Dial(ctx, tc.network, net.JoinHostPort(tc.dial, port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, _ := io.ReadAll(c)
			if string(got) != c.LocalAddr().String() {
				t.Fatalf("peer saw %s, we are %s", got, c.LocalAddr())
			}
		})
	}
	t.Run("command-as-uid", func(t *testing.T) {
		out, err := pod.CommandAs(context.Background(), 4242, 4343, "id", "-u").Output()
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(out)) != "4242" {
			t.Fatalf("id -u = %q", out)
		}
	})
	t.Run("etc-files", func(t *testing.T) {
		n := New(t, "etc")
		n.WriteEtc(t, "hosts", "192.0.2.7 only-in-the-namespace.test\n")
		if out := n.Run(t, "getent", "hosts", "only-in-the-namespace.test"); !strings.Contains(out, "192.0.2.7") {
			t.Fatalf("getent in the namespace: %q", out)
		}
		if out, err := exec.Command("getent", "hosts", "only-in-the-namespace.test").Output(); err == nil {
			t.Fatalf("the name resolves outside the namespace too: %q", out)
		}
	})
	if _, err := os.Stat("/etc/netns"); err == nil {
		if ents, _ := os.ReadDir("/etc/netns"); len(ents) > 0 {
			for _, e := range ents {
				if strings.Contains(e.Name(), fmt.Sprintf("-etc-%d-", os.Getpid())) {
					t.Errorf("/etc/netns/%s left behind", e.Name())
				}
			}
		}
	}
	var name string
	t.Run("cleanup-deletes-namespace", func(t *testing.T) {
		name = New(t, "gone").Name
	})
	if out, err := exec.Command("ip", "netns", "list").Output(); err != nil || strings.Contains(string(out), name) {
		t.Fatalf("namespace %s still listed (err %v): %s", name, err, out)
	}
}

package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A port for a program that takes its port as a setting (Squid, a KDC,
// etcd, redis) is picked before the program binds it. Listening on port 0
// and closing races: the kernel hands the same ephemeral range to every
// outgoing connection and every ":0" listener of every process on the
// machine (CI runs packages in parallel; several engineers share it), so
// the port may be taken between the close and the program's bind. PickPort
// draws from the ports just below the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), which the kernel never hands
// out on its own: only another explicit pick can collide, and check sees a
// port someone already holds.

// PickPort returns a port below the ephemeral range — and below
// Kubernetes' NodePort range (30000-32767), which the real node's
// kube-proxy programs — that check accepts (check binds what the program
// will bind and releases it).
func PickPort(check func(port string) error) (string, error) {
	lo := min(ephemeralLow(), 30000)
	span := min(lo-1024, 16384)
	var last error
	for range 200 {
		p := strconv.Itoa(lo - 1 - rand.IntN(span))
		if last = check(p); last == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no free port below %d: %v", lo, last)
}

// ListenCheck is a PickPort check that listen can bind host:port for TCP.
func ListenCheck(listen func(network, addr string) (net.Listener, error), host string) func(string) error {
	return func(p string) error {
		ln, err := listen("tcp", net.JoinHostPort(host, p))
		if err != nil {
			return err
		}
		return ln.Close()
	}
}

// FreePort returns a loopback TCP port nothing listens on, for a program
// that takes its port as a setting (see PickPort).
func FreePort(t testing.TB) string {
	t.Helper()
	p, err := PickPort(ListenCheck(net.Listen, "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < 2048 {
		return 32768
	}
	return lo
}

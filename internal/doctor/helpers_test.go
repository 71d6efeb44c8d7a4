package doctor

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	goldenfile "egret.io/egret/internal/testutil/golden"
)

// nxResolver knows no name.
type nxResolver struct{}

func (nxResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// refuseDial refuses every connection without touching the network.
func refuseDial(_ context.Context, network, addr string) (net.Conn, error) {
	return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// find returns the first outcome whose "name target" starts with key.
func find(outs []Outcome, key string) (Outcome, bool) {
	for _, o := range outs {
		if strings.HasPrefix(strings.TrimSpace(o.Name+" "+o.Target), key) {
			return o, true
		}
	}
	return Outcome{}, false
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

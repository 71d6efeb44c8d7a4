package doctor

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// goldenFiles are every golden file the tests compare; TestNoUnusedGolden
// keeps testdata/ to exactly these.
var goldenFiles = []string{"report.json.golden", "report.text.golden", "report.verbose.golden"}

// golden compares got with testdata/name, or rewrites it when
// EGRET_UPDATE_GOLDEN=1.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("EGRET_UPDATE_GOLDEN") == "1" {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (EGRET_UPDATE_GOLDEN=1 writes it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (EGRET_UPDATE_GOLDEN=1 rewrites it)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestNoUnusedGolden(t *testing.T) {
	matches, _ := filepath.Glob("testdata/*.golden")
	var have []string
	for _, m := range matches {
		have = append(have, filepath.Base(m))
	}
	sort.Strings(have)
	want := append([]string(nil), goldenFiles...)
	sort.Strings(want)
	if strings.Join(have, ",") != strings.Join(want, ",") {
		t.Errorf("testdata has %v, tests use %v", have, want)
	}
}

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

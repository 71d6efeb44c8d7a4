package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Allocation ceilings on the hot paths. Each counts every allocation in
// the process while one operation runs end to end over loopback — egret's
// side and the test's client and origin — with metrics and the access log
// on, as in production. The ceilings sit a little above what the paths
// cost now (BenchmarkForward, BenchmarkTunnelSetup): a change that adds
// work per request or per tunnel fails here, and one that removes some
// lowers the ceiling with it.
const (
	// maxForwardAllocs bounds one keep-alive GET forwarded direct to a
	// kept-alive origin (27 now).
	maxForwardAllocs = 30
	// maxConnectAllocs bounds one CONNECT tunnel from the client's dial
	// to the origin's close, one request through it (94 now, of which
	// the test's client and origin take about 30).
	maxConnectAllocs = 100
)

func TestAllocsForward(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation ceilings run without -short")
	}
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	port := benchOrigin(t)
	addr := startBenchProxy(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET http://origin.test:" + port + "/small HTTP/1.1\r\nHost: origin.test:" + port + "\r\nUser-Agent: allocs\r\nAccept: */*\r\n\r\n")
	c.Write(req)
	cr := &countReader{r: c}
	br := bufio.NewReader(cr)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != strings.Repeat("x", 64) {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	buf := make([]byte, int(cr.n)-br.Buffered())
	n := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	})
	if !strings.HasSuffix(string(buf), strings.Repeat("x", 64)) {
		t.Fatalf("last response %q", buf)
	}
	t.Logf("%.0f allocations per forwarded GET", n)
	if n > maxForwardAllocs {
		t.Errorf("a forwarded GET costs %.0f allocations, above the ceiling of %d", n, maxForwardAllocs)
	}
}

func TestAllocsConnect(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation ceilings run without -short")
	}
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	port := tcpOriginB(t)
	addr := startBenchProxy(t)
	req := "CONNECT 127.0.0.1:" + port + " HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n"
	buf := make([]byte, 4096)
	got := make([]byte, 0, 4096)
	n := testing.AllocsPerRun(100, func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, req)
		got = got[:0]
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		c.Close()
		if !strings.HasSuffix(string(got), "pong") {
			t.Fatalf("got %q", got)
		}
	})
	t.Logf("%.0f allocations per CONNECT tunnel", n)
	if n > maxConnectAllocs {
		t.Errorf("a CONNECT tunnel costs %.0f allocations, above the ceiling of %d", n, maxConnectAllocs)
	}
}

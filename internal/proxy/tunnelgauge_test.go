package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/route"
)

// TestTunnelsOpenGauge: egret_proxy_tunnels_open{kind="connect"} counts a
// CONNECT tunnel while it relays and drops back when it ends, tunnel after
// tunnel (its child is looked up once and kept), and each tunnel's set-up
// is observed in egret_proxy_request_duration_seconds{kind="connect",
// action="direct"} (that child kept too).
func TestTunnelsOpenGauge(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	m := metrics.New("test")
	_, addr := startBenchServer(t, Options{Metrics: m, AccessLog: io.Discard})
	open := func() float64 {
		var d dto.Metric
		if err := m.TunnelsOpen.WithLabelValues(metrics.KindConnect).Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetGauge().GetValue()
	}
	waitFor := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for open() != want {
			if time.Now().After(deadline) {
				t.Fatalf("tunnels open %v, want %v", open(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "CONNECT "+echo.Addr().String()+" HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		io.WriteString(c, "ping")
		b := make([]byte, 4)
		if _, err := io.ReadFull(br, b); err != nil || string(b) != "ping" {
			t.Fatalf("echo %q %v", b, err)
		}
		waitFor(1)
		c.Close()
		waitFor(0)
	}
	var d dto.Metric
	if err := m.Duration.WithLabelValues(metrics.KindConnect, route.Direct.String()).(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	if n := d.GetHistogram().GetSampleCount(); n != 3 {
		t.Errorf("set-up durations observed: %d, want 3", n)
	}
}

package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestConnectDirect(t *testing.T) {
	// The origin reads until the client half-closes, then answers: this
	// needs the tunnel to pass the half-close on.
	port := tcpOrigin(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		fmt.Fprintf(c, "got %d bytes: %s", len(b), b)
	})
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}})
	c, br, resp := connect(t, p.Addr, "origin.test:"+port, "")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT status %d", resp.StatusCode)
	}
	io.WriteString(c, "ping")
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "got 4 bytes: ping" {
		t.Fatalf("tunnel gave %q, %v", got, err)
	}
	// The tunnel's line is written when its relay ends, which may be
	// after the client has read everything: wait for the line itself.
	waitFor(t, func() bool { return strings.Contains(p.Log.String(), `"msg":"tunnel"`) })
	waitFor(t, func() bool { return p.OpenTunnels() == 0 })
	log := p.Log.String()
	for _, want := range []string{`"msg":"tunnel"`, `"kind":"connect"`, `"bytes_up":4`, `"bytes_down":17`, `"status":200`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
}

func TestConnectEarlyData(t *testing.T) {
	// Clients may send the first bytes right behind the CONNECT request,
	// before the proxy answers (TLS false start, pipelining).
	port := tcpOrigin(t, func(c net.Conn) {
		buf := make([]byte, 5)
		io.ReadFull(c, buf)
		c.Write([]byte(strings.ToUpper(string(buf))))
	})
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}})
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT origin.test:%s HTTP/1.1\r\nHost: origin.test\r\n\r\nhello", port)
	want := "HTTP/1.1 200 Connection established\r\n\r\nHELLO"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestTunnelIdleTimeout(t *testing.T) {
	port := tcpOrigin(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}, timeouts: Timeouts{TunnelIdle: 200 * time.Millisecond}})
	c, br, resp := connect(t, p.Addr, "origin.test:"+port, "")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("idle tunnel read gave %v, want EOF after the idle timeout", err)
	}
}

func TestShutdownDrainsTunnels(t *testing.T) {
	port := tcpOrigin(t, func(c net.Conn) { io.Copy(c, c) })
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}})
	c, br, _ := connect(t, p.Addr, "origin.test:"+port, "")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- p.Shutdown(ctx)
	}()
	// New clients are refused once Shutdown has begun ...
	waitFor(t, func() bool {
		c2, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			c2.Close()
		}
		return err != nil
	})
	// ... but the open tunnel still works until it ends.
	io.WriteString(c, "still here")
	buf := make([]byte, 10)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "still here" {
		t.Fatalf("tunnel during drain: %q, %v", buf, err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a tunnel was open", err)
	case <-time.After(200 * time.Millisecond):
	}
	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the last tunnel closed")
	}
}

func TestShutdownDeadlineClosesTunnels(t *testing.T) {
	port := tcpOrigin(t, func(c net.Conn) { io.Copy(c, c) })
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}})
	c, br, _ := connect(t, p.Addr, "origin.test:"+port, "")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); err == nil {
		t.Error("Shutdown reported a clean drain though a tunnel had to be cut")
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("tunnel after the drain deadline: %v, want EOF", err)
	}
}

func TestMetricsHaveBoundedLabels(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	p := startProxy(t, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1"}})
	resp, err := p.client().Get("http://origin.test:" + port + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The request is counted with its log line, just after the response
	// has gone out.
	waitFor(t, func() bool {
		mfs, _ := p.Metrics.Registry.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "egret_proxy_requests_total" {
				return true
			}
		}
		return false
	})
	mfs, err := p.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "origin.test") || strings.Contains(l.GetValue(), "127.0.0.1") {
					t.Errorf("metric %s has a destination or client in label %s=%q", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
		if mf.GetName() == "egret_proxy_requests_total" {
			found = true
		}
	}
	if !found {
		t.Error("egret_proxy_requests_total was not recorded")
	}
}

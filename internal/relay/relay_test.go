package relay

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// pair returns two connected TCP connections on loopback.
func pair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// tunnel builds client ⇄ [A relay B] ⇄ server and returns the outer ends.
func tunnel(t testing.TB, aPrefix, bPrefix []byte) (client, server net.Conn, res chan Result, tun *Tunnel) {
	client, a := pair(t)
	b, server := pair(t)
	tun = New(a, b)
	res = make(chan Result, 1)
	tun.Start(aPrefix, bPrefix, func(r Result) { res <- r })
	return client, server, res, tun
}

func TestRelayBothWaysWithHalfClose(t *testing.T) {
	client, server, res, _ := tunnel(t, []byte("early:"), []byte("banner:"))
	up := make([]byte, 3<<20)
	rand.Read(up)
	go func() {
		client.Write(up)
		client.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(server) // ends when the client's half-close arrives
	if err != nil || !bytes.Equal(got, append([]byte("early:"), up...)) {
		t.Fatalf("server got %d bytes (%v), want the prefix then %d bytes", len(got), err, len(up))
	}
	// The other direction still works after the half-close.
	io.WriteString(server, "reply")
	server.Close()
	back, _ := io.ReadAll(client)
	if string(back) != "banner:reply" {
		t.Errorf("client got %q", back)
	}
	select {
	case r := <-res:
		if r.Up != int64(len(up)+6) || r.Down != 12 || r.Err != nil {
			t.Errorf("result %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("tunnel did not end")
	}
}

func TestRelayCloseEndsBothSides(t *testing.T) {
	client, server, res, tun := tunnel(t, nil, nil)
	tun.Close()
	for _, c := range []net.Conn{client, server} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("read after Close: %v, want EOF", err)
		}
	}
	select {
	case <-res:
	case <-time.After(5 * time.Second):
		t.Fatal("done was not called")
	}
}

func TestRelayResetEndsTunnel(t *testing.T) {
	client, server, res, _ := tunnel(t, nil, nil)
	server.(*net.TCPConn).SetLinger(0)
	server.Close() // RST
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	// The client's side is ended too: an end of stream or a reset, not the
	// deadline.
	if _, err := io.ReadAll(client); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("client read: %v, want EOF or a reset", err)
	}
	select {
	case <-res:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("tunnel did not end after a reset\n%s", buf[:n])
	}
}

// Idle tunnels hold no relay buffer: memory for thousands of quiet tunnels
// is only their goroutines and sockets.
func TestIdleTunnelsHoldNoBuffers(t *testing.T) {
	var clients []net.Conn
	for i := 0; i < 50; i++ {
		c, s, _, _ := tunnel(t, nil, nil)
		io.WriteString(c, "x")
		buf := make([]byte, 1)
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(s, buf); err != nil || buf[0] != 'x' {
			t.Fatalf("tunnel %d relayed %q, %v", i, buf, err)
		}
		clients = append(clients, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for held.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d buffers held by idle tunnels, want 0", held.Load())
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
	_ = clients
}

// BenchmarkRelayBulk streams through a relay; compare with BenchmarkDirect.
func BenchmarkRelayBulk(b *testing.B) {
	client, server, _, _ := tunnel(b, nil, nil)
	benchStream(b, server, client)
}

func BenchmarkDirect(b *testing.B) {
	a, c := pair(b)
	benchStream(b, a, c)
}

func benchStream(b *testing.B, w, r net.Conn) {
	chunk := make([]byte, 256<<10)
	const total = 64 << 20
	b.SetBytes(total)
	b.ReportAllocs()
	buf := make([]byte, 256<<10)
	for b.Loop() {
		done := make(chan struct{})
		go func() {
			for n := 0; n < total; n += len(chunk) {
				w.Write(chunk)
			}
			close(done)
		}()
		for n := 0; n < total; {
			m, err := r.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			n += m
		}
		<-done
	}
}

// TestStartInline: the direction left to the caller relays A → B (prefix
// first) on the caller's goroutine and returns when it ends; B → A runs on
// its own; done comes once, after both ended, with both counts.
func TestStartInline(t *testing.T) {
	client, a := pair(t)
	b, server := pair(t)
	tun := New(a, b)
	res := make(chan Result, 2)
	run := tun.StartInline([]byte("early:"), []byte("banner:"), func(r Result) { res <- r })
	ran := make(chan struct{})
	go func() { run(); close(ran) }()
	io.WriteString(client, "up")
	client.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "early:up" {
		t.Fatalf("server got %q (%v)", got, err)
	}
	select {
	case <-ran: // the caller's direction ended with the client's half-close
	case <-time.After(5 * time.Second):
		t.Fatal("the inline direction did not return after its end of stream")
	}
	io.WriteString(server, "down")
	server.(*net.TCPConn).CloseWrite()
	got, err = io.ReadAll(client)
	if err != nil || string(got) != "banner:down" {
		t.Fatalf("client got %q (%v)", got, err)
	}
	select {
	case r := <-res:
		if r.Up != int64(len("early:up")) || r.Down != int64(len("banner:down")) {
			t.Errorf("result %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("done was not called")
	}
	select {
	case r := <-res:
		t.Errorf("done called twice: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
}

// panicConn panics on its first Read with a value holding a secret.
type panicConn struct{ net.Conn }

func (c panicConn) Read([]byte) (int, error) { panic(errors.New("token=s3cr3t")) }

// TestPanicEndsOnlyTheTunnel: a panic in a relay goroutine is recovered:
// the tunnel is closed, done comes once with ErrPanic, OnPanic gets the
// value and a stack, the count goes up, and the process goes on.
func TestPanicEndsOnlyTheTunnel(t *testing.T) {
	client, a := pair(t)
	b, server := pair(t)
	tun := New(panicConn{a}, b)
	var got any
	var stack []byte
	tun.OnPanic = func(v any, s []byte) { got, stack = v, s }
	before := Panics()
	res := make(chan Result, 2)
	tun.Start(nil, nil, func(r Result) { res <- r })
	select {
	case r := <-res:
		if !errors.Is(r.Err, ErrPanic) {
			t.Errorf("result error %v, want ErrPanic", r.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the tunnel did not end after its relay goroutine panicked")
	}
	if got == nil || !bytes.Contains(stack, []byte("panicConn")) {
		t.Errorf("OnPanic got %v and a stack of %d bytes", got, len(stack))
	}
	if Panics() != before+1 {
		t.Errorf("Panics() = %d, want %d", Panics(), before+1)
	}
	// Both sides are closed.
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Error("the client side is still open")
	}
	if _, err := server.Read(make([]byte, 1)); err == nil {
		t.Error("the destination side is still open")
	}
	select {
	case <-res:
		t.Error("done came twice")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestAfterClose: Close calls what AfterClose arranged, and AfterClose on
// a closed tunnel calls it at once (an intercepted tunnel's context ends
// when the reaper or a drain closes it).
func TestAfterClose(t *testing.T) {
	a, b := pair(t)
	tun := New(a, b)
	var n atomic.Int32
	tun.AfterClose(func() { n.Add(1) })
	if n.Load() != 0 {
		t.Fatal("called before Close")
	}
	tun.Close()
	if n.Load() != 1 {
		t.Fatalf("Close called it %d times, want 1", n.Load())
	}
	var m atomic.Int32
	tun.AfterClose(func() { m.Add(1) })
	if m.Load() != 1 {
		t.Error("AfterClose on a closed tunnel did not call at once")
	}
}

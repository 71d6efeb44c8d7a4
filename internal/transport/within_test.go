package transport

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"egret.io/egret/internal/proxystatus"
)

// hangingAddr returns a loopback address whose connects hang: a listener
// with a backlog of 0 whose accept queue is already full, so the kernel
// drops further SYNs.
func hangingAddr(t *testing.T) netip.AddrPort {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
	// Fill the accept queue; the dials that do not connect at once are
	// the hanging kind already.
	for range 4 {
		c, err := net.DialTimeout("tcp", ap.String(), 200*time.Millisecond)
		if err != nil {
			return ap
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("the listener's accept queue never filled")
	return ap
}

// TestDialAddrsWithin: the dial timeout holds with the default dialler,
// where it is the socket's deadline and no timer of the transport's, with
// a cancellable and an uncancellable context, and with a custom dialler;
// a client that leaves still ends the dial at once.
func TestDialAddrsWithin(t *testing.T) {
	ap := hangingAddr(t)
	addrs := []netip.Addr{ap.Addr()}
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name string
		tr   *Transport
		ctx  context.Context
	}{
		{"default dialler", New(nil, nil), cctx},
		{"uncancellable context", New(nil, nil), context.Background()},
		{"custom dialler", New(DialTCP, nil), cctx},
	} {
		start := time.Now()
		_, err := tc.tr.DialAddrsWithin(tc.ctx, 150*time.Millisecond, "hang.test:80", addrs, ap.Port())
		took := time.Since(start)
		if pe := proxystatus.From(err); err == nil || pe.Type != proxystatus.ConnectionTimeout {
			t.Errorf("%s: %v (%s), want a connection_timeout", tc.name, err, pe.Type)
		}
		if took < 100*time.Millisecond || took > 5*time.Second {
			t.Errorf("%s: gave up after %v, want about 150ms", tc.name, took)
		}
	}
	// The client leaves: the dial ends before its deadline.
	ctx, leave := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, leave)
	start := time.Now()
	_, err := New(nil, nil).DialAddrsWithin(ctx, 10*time.Second, "hang.test:80", addrs, ap.Port())
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("client left: %v after %v", err, time.Since(start))
	}
}

// TestDeadlineCtx: Err reports the deadline once it passed, and the
// parent's cancellation before that.
func TestDeadlineCtx(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	c := deadlineCtx{Context: parent, dl: time.Now().Add(time.Hour)}
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	if dl, ok := c.Deadline(); !ok || !dl.Equal(c.dl) {
		t.Errorf("deadline %v %v", dl, ok)
	}
	cancel()
	if c.Err() != context.Canceled {
		t.Errorf("after cancel: %v", c.Err())
	}
	past := deadlineCtx{Context: context.Background(), dl: time.Now().Add(-time.Second)}
	if past.Err() != context.DeadlineExceeded {
		t.Errorf("past: %v", past.Err())
	}
}

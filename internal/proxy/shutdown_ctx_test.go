package proxy

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"egret.io/egret/internal/route"
)

// stuckResolver answers nothing until its context ends, then reports it.
type stuckResolver struct {
	asked, gaveUp chan struct{}
}

func (r *stuckResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.asked <- struct{}{}
	<-ctx.Done()
	r.gaveUp <- struct{}{}
	return nil, ctx.Err()
}

// TestShutdownCancelsWork: what a connection still waits on when Shutdown
// cuts it off — here a lookup for a forwarded request with a body, which
// no watch of the client covers — is cancelled through the connection's
// context, derived from the server's, instead of running on after the
// server is gone.
func TestShutdownCancelsWork(t *testing.T) {
	res := &stuckResolver{asked: make(chan struct{}, 1), gaveUp: make(chan struct{}, 1)}
	tbl, err := route.New([]route.Rule{{Match: route.Match{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, Action: route.Direct, Source: "test"}}, route.Direct, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Via: "egret-test", Resolver: res}, &State{Routes: tbl})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST http://stuck.test/ HTTP/1.1\r\nHost: stuck.test\r\nContent-Length: 2\r\n\r\nhi")
	select {
	case <-res.asked:
	case <-time.After(5 * time.Second):
		t.Fatal("the name was never looked up")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err == nil {
		t.Error("Shutdown reports nothing cut off while a request was waiting")
	}
	select {
	case <-res.gaveUp:
	case <-time.After(5 * time.Second):
		t.Fatal("the lookup of a connection Shutdown cut off was not cancelled")
	}
}

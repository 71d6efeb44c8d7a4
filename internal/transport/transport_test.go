package transport

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/upstream"
)

// TestDialAddrs: the approved addresses are tried in order — a refused one
// gives way to the next — and a failure names the destination, the cause
// and how many addresses were tried, never anything but those addresses.
func TestDialAddrs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	testutil.Serve(t, ln, func(c net.Conn) { io.WriteString(c, "hi") })
	port := ln.Addr().(*net.TCPAddr).AddrPort().Port()
	var dialled []string
	tr := New(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		return DialTCP(ctx, network, addr)
	}, nil)
	closed, good := netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.2")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := tr.DialAddrs(ctx, "app.test:80", []netip.Addr{closed, good}, port)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "hi" {
		t.Fatalf("read %q", b)
	}
	want := []string{netip.AddrPortFrom(closed, port).String(), netip.AddrPortFrom(good, port).String()}
	if strings.Join(dialled, " ") != strings.Join(want, " ") {
		t.Errorf("dialled %v, want %v", dialled, want)
	}
	_, err = tr.DialAddrs(ctx, "app.test:80", []netip.Addr{closed, closed}, port)
	pe := proxystatus.From(err)
	if pe.Type != proxystatus.ConnectionRefused || !strings.HasPrefix(pe.Detail, "connect to app.test:80: ") || !strings.Contains(pe.Detail, "(2 addresses tried)") {
		t.Errorf("both refused: %s %q", pe.Type, pe.Detail)
	}
	// A zone and an IPv6 address are dialled in brackets.
	dialled = nil
	tr.DialAddrs(ctx, "v6.test:80", []netip.Addr{netip.MustParseAddr("fe80::1%lo")}, 9)
	if len(dialled) != 1 || dialled[0] != "[fe80::1%lo]:9" {
		t.Errorf("dialled %v", dialled)
	}
}

// TestConnectAnswerBounded: a member whose CONNECT answer header never
// ends is cut off at the response-header bound, and the failure names the
// member (it is the member's fault, and another is tried).
func TestConnectAnswerBounded(t *testing.T) {
	addr := testutil.TCPServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Pad: " + strings.Repeat("a", 1000) + "\r\n"
		for {
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	})
	p := &upstream.Pool{Name: "p", Members: members(t, "http://"+addr), ConnectTimeout: 5 * time.Second}
	_, err := New(nil, nil).DialTunnel(context.Background(), p, "partner.test:443")
	pe := proxystatus.From(err)
	if pe.Type != proxystatus.HTTPResponseHeaderSize || pe.Upstream != "http://"+addr {
		t.Fatalf("endless CONNECT answer: %v (type %s, upstream %q)", err, pe.Type, pe.Upstream)
	}
	if member, retry := upstream.Fault(err); !member || !retry {
		t.Errorf("an endless answer: member's fault %v, another member tried %v; want both", member, retry)
	}
}

// TestChallengeBodyBounded: a 407 whose challenge body is larger than
// egret reads before the next round ends the handshake with a protocol
// error naming the member.
func TestChallengeBodyBounded(t *testing.T) {
	addr := testutil.TCPServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: NTLM TlRMTVNTUAACAAAAAAAAAAAAAAAFgomiAAAAAAAAAAAAAAAAAAAAAA==\r\nContent-Length: 100000\r\n\r\n")
		io.WriteString(c, strings.Repeat("x", 100000))
		io.Copy(io.Discard, br)
	})
	p := &upstream.Pool{Name: "p", Members: members(t, "http://user:pw@"+addr+" auth=ntlm"), ConnectTimeout: 5 * time.Second}
	_, err := New(nil, nil).DialTunnel(context.Background(), p, "partner.test:443")
	pe := proxystatus.From(err)
	if pe.Upstream != "http://"+addr || !strings.Contains(pe.Detail, "larger than 64 KiB") {
		t.Fatalf("oversized challenge: %v (type %s)", err, pe.Type)
	}
	if strings.Contains(err.Error(), "pw") {
		t.Errorf("the error holds the password: %v", err)
	}
}

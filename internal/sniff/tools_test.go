package sniff

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("EGRET_REQUIRE_ALL") == "1" {
			t.Fatalf("%s not found (EGRET_REQUIRE_ALL=1; run `make test-deps`)", name)
		}
		t.Skipf("%s not found (run `make test-deps`)", name)
	}
	return p
}

// sniffServer accepts connections on loopback, sniffs each, reports the
// result, then serves it with the peeked bytes replayed: TLS is terminated
// with cert (the handshake completes only if no byte was lost), then one
// HTTP request is answered with the sniffed name.
func sniffServer(t *testing.T, cert tls.Certificate) (addr string, results chan Result) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	results = make(chan Result, 8)
	testutil.Serve(t, ln, func(c net.Conn) {
		res, err := Sniff(c, Options{})
		results <- res
		if err != nil {
			return
		}
		var conn net.Conn = NewConn(c, res.Peeked)
		if res.Proto == TLS {
			tc := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{cert}})
			if err := tc.Handshake(); err != nil {
				return
			}
			conn = tc
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body := fmt.Sprintf("sniffed %s %s, request host %s", res.Proto, res.Host, req.Host)
		fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body)+1, body+"\n")
		conn.Close() // a TLS close_notify before the TCP close
	})
	return ln.Addr().String(), results
}

func nextResult(t *testing.T, ch chan Result) Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no connection was sniffed")
		return Result{}
	}
}

// TestRealClients sniffs what real curl and openssl send and then completes
// the TLS handshake (or HTTP exchange) over the replayed bytes.
func TestRealClients(t *testing.T) {
	cert, certFile := testutil.SelfSigned(t, "", "partner.example.test")
	addr, results := sniffServer(t, cert)
	_, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("curl-https", func(t *testing.T) {
		curl := needTool(t, "curl")
		out, err := exec.CommandContext(ctx, curl, "-sS", "--noproxy", "*", "--max-time", "10",
			"--cacert", certFile, "--resolve", "partner.example.test:"+port+":127.0.0.1",
			"https://partner.example.test:"+port+"/x").CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v: %s", err, out)
		}
		res := nextResult(t, results)
		if res.Proto != TLS || res.Host != "partner.example.test" {
			t.Fatalf("sniffed %s %q", res.Proto, res.Host)
		}
		if want := "sniffed tls partner.example.test, request host partner.example.test:" + port; strings.TrimSpace(string(out)) != want {
			t.Fatalf("curl got %q, want %q", out, want)
		}
	})
	t.Run("curl-http", func(t *testing.T) {
		curl := needTool(t, "curl")
		out, err := exec.CommandContext(ctx, curl, "-sS", "--noproxy", "*", "--max-time", "10",
			"--resolve", "web.example.test:"+port+":127.0.0.1", "http://web.example.test:"+port+"/").CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v: %s", err, out)
		}
		res := nextResult(t, results)
		if res.Proto != HTTP || res.Host != "web.example.test" || strconv.Itoa(int(res.Port)) != port {
			t.Fatalf("sniffed %s %q %d", res.Proto, res.Host, res.Port)
		}
		if want := "sniffed http web.example.test, request host web.example.test:" + port; strings.TrimSpace(string(out)) != want {
			t.Fatalf("curl got %q, want %q", out, want)
		}
	})
	t.Run("openssl-s-client", func(t *testing.T) {
		openssl := needTool(t, "openssl")
		for _, args := range [][]string{{"-tls1_3"}, {"-tls1_2"}} {
			cmd := exec.CommandContext(ctx, openssl, append([]string{"s_client", "-connect", addr,
				"-servername", "Partner.Example.Test", "-CAfile", certFile, "-verify_return_error", "-quiet"}, args...)...)
			cmd.Stdin = strings.NewReader("GET / HTTP/1.1\r\nHost: partner.example.test\r\n\r\n")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("openssl %v: %v: %s", args, err, out)
			}
			res := nextResult(t, results)
			if res.Proto != TLS || res.Host != "partner.example.test" {
				t.Fatalf("openssl %v: sniffed %s %q", args, res.Proto, res.Host)
			}
			if !strings.Contains(string(out), "sniffed tls partner.example.test, request host partner.example.test") {
				t.Fatalf("openssl %v: handshake over replayed bytes did not complete: %s", args, out)
			}
		}
	})
}

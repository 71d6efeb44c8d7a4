package socks5

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
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

// outcome is what the test server saw for one client.
type outcome struct {
	req   Request
	err   error
	reply ReplyCode
}

// server is a tiny SOCKS5 proxy built the way egret's listener uses the
// package: Handshake, then resolve (from a fixed table, never DNS) and dial
// on loopback, then Reply, then relay with io.Copy.
func server(t *testing.T, auth Auth, hosts map[string]string) (addr string, outcomes chan outcome) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	outcomes = make(chan outcome, 16)
	testutil.Serve(t, ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := Handshake(c, auth)
		if err != nil {
			outcomes <- outcome{req: req, err: err}
			return
		}
		host := req.Dest.Host()
		if req.Dest.Name != "" {
			ip, ok := hosts[req.Dest.Name]
			if !ok {
				Reply(c, HostUnreachable, netip.AddrPort{})
				outcomes <- outcome{req: req, reply: HostUnreachable}
				return
			}
			host = ip
		}
		up, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(int(req.Dest.Port))), 5*time.Second)
		if err != nil {
			code := ReplyCodeFor(err)
			Reply(c, code, netip.AddrPort{})
			outcomes <- outcome{req: req, reply: code}
			return
		}
		defer up.Close()
		if err := Reply(c, Succeeded, netip.MustParseAddrPort(up.LocalAddr().String())); err != nil {
			outcomes <- outcome{req: req, err: err}
			return
		}
		outcomes <- outcome{req: req, reply: Succeeded}
		c.SetDeadline(time.Time{})
		done := make(chan struct{})
		go func() {
			io.Copy(up, c)
			up.(*net.TCPConn).CloseWrite()
			close(done)
		}()
		io.Copy(c, up)
		c.(*net.TCPConn).CloseWrite()
		<-done
	})
	return ln.Addr().String(), outcomes
}

func next(t *testing.T, ch chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("the SOCKS server saw no client")
		return outcome{}
	}
}

// TestCurl proves interoperability with a real client: curl through the
// package's server with remote (socks5h) and local (socks5) name
// resolution, IPv4 and IPv6 destinations, username/password (including
// reserved characters, percent-encoded in the proxy URL), and the failures
// curl must see: wrong password, missing credentials, refused target.
func TestCurl(t *testing.T) {
	curl := needTool(t, "curl")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "origin saw host %s", r.Host)
	}))
	defer origin.Close()
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	var origin6Port string
	if ln6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		o6 := httptest.NewUnstartedServer(origin.Config.Handler)
		o6.Listener.Close()
		o6.Listener = ln6
		o6.Start()
		defer o6.Close()
		_, origin6Port, _ = net.SplitHostPort(ln6.Addr().String())
	}
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	_, closedPort, _ := net.SplitHostPort(closed.Addr().String())
	closed.Close()
	hosts := map[string]string{"origin.test": "127.0.0.1", "refused.test": "127.0.0.1"}

	open, openOutcomes := server(t, Auth{}, hosts)
	authed, authedOutcomes := server(t, Auth{Check: StaticCredentials("alice", "p@ss:w0rd")}, hosts)

	tests := []struct {
		name     string
		args     []string
		outcomes chan outcome
		wantBody string // empty: curl must fail
		check    func(outcome) error
	}{
		{"socks5-hostname-sends-the-name", []string{"--socks5-hostname", open, "http://origin.test:" + port + "/"}, openOutcomes,
			"origin saw host origin.test:" + port, func(o outcome) error {
				if o.req.Dest.Name != "origin.test" || o.req.User != "" {
					return fmt.Errorf("request %+v", o.req)
				}
				return nil
			}},
		{"socks5h-url", []string{"-x", "socks5h://" + open, "http://origin.test:" + port + "/"}, openOutcomes,
			"origin saw host origin.test:" + port, func(o outcome) error {
				if o.req.Dest.Name != "origin.test" {
					return fmt.Errorf("request %+v", o.req)
				}
				return nil
			}},
		{"socks5-ipv4", []string{"--socks5", open, "http://127.0.0.1:" + port + "/"}, openOutcomes,
			"origin saw host 127.0.0.1:" + port, func(o outcome) error {
				if o.req.Dest.IP != netip.MustParseAddr("127.0.0.1") || o.req.Dest.Name != "" {
					return fmt.Errorf("request %+v", o.req)
				}
				return nil
			}},
		{"socks5-ipv6", []string{"--socks5", open, "http://[::1]:" + origin6Port + "/"}, openOutcomes,
			"origin saw host [::1]:" + origin6Port, func(o outcome) error {
				if o.req.Dest.IP != netip.IPv6Loopback() {
					return fmt.Errorf("request %+v", o.req)
				}
				return nil
			}},
		{"user-pass-in-url", []string{"-x", "socks5h://alice:p%40ss%3Aw0rd@" + authed, "http://origin.test:" + port + "/"}, authedOutcomes,
			"origin saw host origin.test:" + port, func(o outcome) error {
				if o.req.User != "alice" {
					return fmt.Errorf("user %q", o.req.User)
				}
				return nil
			}},
		{"user-pass-flag", []string{"--socks5-hostname", authed, "--proxy-user", "alice:p@ss:w0rd", "http://origin.test:" + port + "/"}, authedOutcomes,
			"origin saw host origin.test:" + port, nil},
		{"wrong-password", []string{"-x", "socks5h://alice:nope@" + authed, "http://origin.test:" + port + "/"}, authedOutcomes,
			"", func(o outcome) error {
				if !errors.Is(o.err, ErrAuthFailed) {
					return fmt.Errorf("err %v", o.err)
				}
				return nil
			}},
		{"credentials-missing", []string{"-x", "socks5h://" + authed, "http://origin.test:" + port + "/"}, authedOutcomes,
			"", func(o outcome) error {
				if !errors.Is(o.err, ErrNoAcceptableMethod) {
					return fmt.Errorf("err %v", o.err)
				}
				return nil
			}},
		{"refused-target", []string{"--socks5-hostname", open, "http://refused.test:" + closedPort + "/"}, openOutcomes,
			"", func(o outcome) error {
				if o.reply != ConnectionRefused {
					return fmt.Errorf("reply %s", o.reply)
				}
				return nil
			}},
		{"unknown-name", []string{"--socks5-hostname", open, "http://nowhere.test:" + port + "/"}, openOutcomes,
			"", func(o outcome) error {
				if o.reply != HostUnreachable || o.req.Dest.Name != "nowhere.test" {
					return fmt.Errorf("reply %s for %+v", o.reply, o.req)
				}
				return nil
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(strings.Join(tc.args, " "), "[::1]:/") {
				t.Skip("no IPv6 loopback")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"-sS", "--max-time", "10"}, tc.args...)
			out, err := exec.CommandContext(ctx, curl, args...).Output()
			if tc.wantBody == "" {
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 97 { // CURLE_PROXY
					t.Fatalf("curl: %v (want exit 97): %s", err, out)
				}
				t.Logf("curl said: %s", strings.TrimSpace(string(ee.Stderr)))
			} else if err != nil || string(out) != tc.wantBody {
				t.Fatalf("curl: %v: %q, want %q", err, out, tc.wantBody)
			}
			o := next(t, tc.outcomes)
			if tc.check != nil {
				if err := tc.check(o); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

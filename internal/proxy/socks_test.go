package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/socks5"
	"egret.io/egret/internal/testutil/squid"
)

const (
	socksUser = "app"
	socksPass = "s0cks:p@ss"
)

// socks adds a SOCKS5 listener with auth.
func (p *rawProxy) socks(t *testing.T, auth socks5.Auth) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.ServeSOCKS(ln, SOCKSOptions{Auth: auth})
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestSOCKSCurl drives the SOCKS5 listener with the real curl: names sent
// to the proxy route by name (upstream through a real Squid with Basic
// auth, or direct by rule), addresses by address; denials, refusals and
// authentication failures get the matching SOCKS5 reply.
func TestSOCKSCurl(t *testing.T) {
	_, hport := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "origin host=%s", r.Host)
	}))
	closed := closedPort(t)
	sq := squid.Start(t, squid.Options{User: squidUser, Password: squidPass, Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	p := startRaw(t, proxyConf{
		members: []string{fmt.Sprintf("http://%s:%s@%s", squidUser, encPass, sq.Addr)},
		hosts:   map[string]string{"internal.test": "127.0.0.1", "blocked.test": "127.0.0.1"},
		rules: []route.Rule{
			{Match: route.Match{Hosts: []string{"internal.test"}}, Action: route.Direct, Source: "test direct"},
			{Match: route.Match{Hosts: []string{"blocked.test"}}, Action: route.Deny, Source: "test deny"},
		},
	})
	open := p.socks(t, socks5.Auth{})
	authed := p.socks(t, socks5.Auth{Check: socks5.StaticCredentials(socksUser, socksPass)})

	tests := []struct {
		name     string
		args     []string
		wantOut  string // substring of the output; "" = curl must fail
		wantErr  string // substring of curl's error when it must fail
		dest     string
		fields   map[string]string
		squidLog string
	}{
		{
			name:     "socks5-hostname-routes-by-name-through-squid",
			args:     []string{"--socks5-hostname", open, "http://partner.test:" + hport + "/"},
			wantOut:  "origin host=partner.test:" + hport,
			dest:     "partner.test:" + hport,
			fields:   map[string]string{"route": "upstream", "reason": "default", "status": "200", "upstream": "http://" + sq.Addr},
			squidLog: "CONNECT partner.test:" + hport + " " + squidUser,
		},
		{
			name:    "socks5-sends-an-address-routed-by-address",
			args:    []string{"--socks5", open, "--resolve", "partner.test:" + hport + ":127.0.0.1", "http://partner.test:" + hport + "/"},
			wantOut: "origin host=partner.test:" + hport,
			dest:    "127.0.0.1:" + hport,
			fields:  map[string]string{"route": "direct", "reason": "loopback", "status": "200"},
		},
		{
			name:    "direct-rule-by-name",
			args:    []string{"--socks5-hostname", open, "http://internal.test:" + hport + "/"},
			wantOut: "origin host=internal.test:" + hport,
			dest:    "internal.test:" + hport,
			fields:  map[string]string{"route": "direct", "reason": "host", "status": "200"},
		},
		{
			name:     "socks5h-url-with-credentials",
			args:     []string{"-x", "socks5h://" + socksUser + ":s0cks%3Ap%40ss@" + authed, "http://partner.test:" + hport + "/auth"},
			wantOut:  "origin host=partner.test:" + hport,
			dest:     "partner.test:" + hport,
			fields:   map[string]string{"route": "upstream", "status": "200"},
			squidLog: "CONNECT partner.test:" + hport + " " + squidUser,
		},
		{
			name:    "deny-is-not-allowed-by-ruleset",
			args:    []string{"--socks5-hostname", open, "http://blocked.test:" + hport + "/"},
			wantErr: "(2)",
			dest:    "blocked.test:" + hport,
			fields:  map[string]string{"route": "deny", "status": "403", "error": "http_request_denied"},
		},
		{
			name:    "refused-destination-is-connection-refused",
			args:    []string{"--socks5", open, "http://127.0.0.1:" + closed + "/"},
			wantErr: "(5)",
			dest:    "127.0.0.1:" + closed,
			fields:  map[string]string{"route": "direct", "status": "502", "error": "connection_refused"},
		},
		{
			name:    "wrong-password-is-rejected",
			args:    []string{"-x", "socks5h://" + socksUser + ":wrong@" + authed, "http://partner.test:" + hport + "/"},
			wantErr: "rejected",
			dest:    "",
			fields:  map[string]string{"status": "407", "error": "http_request_denied"},
		},
		{
			name:    "no-credentials-when-required",
			args:    []string{"--socks5-hostname", authed, "http://partner.test:" + hport + "/"},
			wantErr: "acceptable",
			dest:    "",
			fields:  map[string]string{"status": "407", "error": "http_request_denied"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, off := len(sq.AccessLog()), len(p.Log.String())
			out, stderr, code := runCurl(t, tc.args...)
			switch {
			case tc.wantOut == "" && (code == 0 || !strings.Contains(stderr, tc.wantErr)):
				t.Fatalf("curl exit %d: %q %q, want a failure with %q", code, out, stderr, tc.wantErr)
			case tc.wantOut != "" && (code != 0 || !strings.Contains(out, tc.wantOut)):
				t.Fatalf("curl exit %d: %q (stderr %q), want %q", code, out, stderr, tc.wantOut)
			}
			wantFields(t, p.logLineAfter(t, off, metrics.KindSOCKS, tc.dest), tc.fields)
			if tc.squidLog != "" {
				sq.WaitLog(t, tc.squidLog)
			} else if after := sq.AccessLog(); len(after) != before {
				t.Errorf("squid saw a connection that must not go upstream: %v", after[before:])
			}
		})
	}
	for _, secret := range []string{socksPass, "s0cks%3Ap%40ss", squidPass, encPass} {
		if strings.Contains(p.Log.String(), secret) {
			t.Errorf("a password (%q) reached the log", secret)
		}
	}
}

// TestSOCKSProtocol covers what curl cannot send: commands egret does not
// serve, a client that leaves at once, and an upstream's refusal mapped to
// a reply code.
func TestSOCKSProtocol(t *testing.T) {
	up, targets := recordingUpstream(t)
	p := startRaw(t, proxyConf{members: []string{"http://" + up}})
	addr := p.socks(t, socks5.Auth{})
	dial := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return c
	}
	request := func(t *testing.T, cmd socks5.Command, dst socks5.Addr) []byte {
		c := dial(t)
		c.Write([]byte{socks5.Version, 1, socks5.MethodNoAuth})
		sel := make([]byte, 2)
		if _, err := io.ReadFull(c, sel); err != nil || sel[1] != socks5.MethodNoAuth {
			t.Fatalf("method selection %v, %v", sel, err)
		}
		b, err := socks5.AppendRequest(nil, socks5.Request{Command: cmd, Dest: dst})
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b)
		reply := make([]byte, 10)
		if _, err := io.ReadFull(c, reply); err != nil {
			t.Fatalf("read reply: %v", err)
		}
		return reply
	}
	t.Run("udp-associate-is-not-supported", func(t *testing.T) {
		r := request(t, socks5.UDPAssociate, socks5.Addr{IP: netip.MustParseAddr("0.0.0.0"), Port: 0})
		if socks5.ReplyCode(r[1]) != socks5.CommandNotSupported {
			t.Errorf("reply %v, want command not supported", socks5.ReplyCode(r[1]))
		}
	})
	t.Run("upstream-403-is-not-allowed", func(t *testing.T) {
		r := request(t, socks5.Connect, socks5.Addr{Name: "partner.test", Port: 443})
		if socks5.ReplyCode(r[1]) != socks5.NotAllowed {
			t.Errorf("reply %v, want not allowed", socks5.ReplyCode(r[1]))
		}
		if got := <-targets; !strings.HasPrefix(got, "CONNECT partner.test:443") {
			t.Errorf("upstream got %q", got)
		}
		wantFields(t, p.logLine(t, metrics.KindSOCKS, "partner.test:443"), map[string]string{"error": "upstream_refused", "status": "403"})
	})
	t.Run("silent-client-is-not-logged", func(t *testing.T) {
		c := dial(t)
		client := c.LocalAddr().String()
		c.Close()
		time.Sleep(100 * time.Millisecond)
		if strings.Contains(p.Log.String(), `"client":"`+client+`"`) {
			t.Errorf("a client that sent nothing was logged: %s", p.Log.String())
		}
	})
	t.Run("garbage-is-a-request-error", func(t *testing.T) {
		off := len(p.Log.String())
		c := dial(t)
		io.WriteString(c, "GET / HTTP/1.1\r\n\r\n")
		io.Copy(io.Discard, c)
		wantFields(t, p.logLineAfter(t, off, metrics.KindSOCKS, ""), map[string]string{"error": "http_request_error", "status": "400"})
	})
}

func TestSOCKSReplyFor(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		err  error
		want socks5.ReplyCode
	}{
		{"direct-refused", &proxystatus.Error{Type: proxystatus.ConnectionRefused, Err: refused}, socks5.ConnectionRefused},
		{"direct-unreachable", &proxystatus.Error{Type: proxystatus.DestinationIPUnroute, Err: &net.OpError{Op: "dial", Err: syscall.EHOSTUNREACH}}, socks5.HostUnreachable},
		{"direct-timeout", &proxystatus.Error{Type: proxystatus.ConnectionTimeout, Err: context.DeadlineExceeded}, socks5.TTLExpired},
		{"name-not-found", &proxystatus.Error{Type: proxystatus.DestinationNotFound, Err: &net.DNSError{Err: "no such host", IsNotFound: true}}, socks5.HostUnreachable},
		{"dns-timeout", &proxystatus.Error{Type: proxystatus.DNSTimeout, Err: errors.New("timeout")}, socks5.TTLExpired},
		// Through an upstream, a refused connection is the upstream's, not
		// the destination's.
		{"upstream-member-refused", &proxystatus.Error{Type: proxystatus.ConnectionRefused, Upstream: "http://u:3128", Err: refused}, socks5.GeneralFailure},
		{"upstream-403", &proxystatus.Error{Type: proxystatus.UpstreamRefused, Status: 403, Upstream: "http://u:3128"}, socks5.NotAllowed},
		{"upstream-504", &proxystatus.Error{Type: proxystatus.UpstreamRefused, Status: 504, Upstream: "http://u:3128"}, socks5.TTLExpired},
		{"upstream-407", &proxystatus.Error{Type: proxystatus.UpstreamAuthRequired, Status: 502, Upstream: "http://u:3128"}, socks5.GeneralFailure},
		{"pool-unavailable", &proxystatus.Error{Type: proxystatus.PoolUnavailable}, socks5.GeneralFailure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := socksReplyFor(tc.err, proxystatus.From(tc.err)); got != tc.want {
				t.Errorf("socksReplyFor = %v, want %v", got, tc.want)
			}
		})
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

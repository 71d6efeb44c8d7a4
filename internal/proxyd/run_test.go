package proxyd

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/testutil"
)

// TestRunServesTransparentAndSOCKS runs the whole proxy from a
// configuration with both extra listeners: SOCKS5 credentials come from
// the environment, the status page lists the listeners, the transparent
// listener's loop guard knows the other listeners, and the drain stops
// everything.
func TestRunServesTransparentAndSOCKS(t *testing.T) {
	_, hport := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "via run") }))
	env := map[string]string{
		"LISTEN_ADDR": "127.0.0.1:0", "ADMIN_LISTEN_ADDR": "127.0.0.1:0",
		"TRANSPARENT_LISTEN_ADDR": "127.0.0.1:0", "SOCKS_LISTEN_ADDR": "127.0.0.1:0",
		"SOCKS_USER": socksUser, "SOCKS_PASS": socksPass,
		"EGRET_DNS_SERVERS": "127.0.0.1:1", "EGRET_DRAIN_PERIOD": "0s", "EGRET_DRAIN_TIMEOUT": "2s",
	}
	cfg, err := config.Load(config.Sources{Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Options{Version: "test", AccessLog: logs, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
			Started: func(a Addrs) { started <- a }})
	}()
	var addrs Addrs
	select {
	case addrs = <-started:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not start")
	}
	if addrs.Transparent == "" || addrs.SOCKS == "" {
		t.Fatalf("addrs %+v: want transparent and socks listeners", addrs)
	}

	t.Run("socks-with-credentials-from-the-environment", func(t *testing.T) {
		out, stderr, code := runCurl(t, "-x", "socks5h://"+socksUser+":s0cks%3Ap%40ss@"+addrs.SOCKS, "http://127.0.0.1:"+hport+"/")
		if code != 0 || out != "via run" {
			t.Fatalf("curl exit %d: %q %q", code, out, stderr)
		}
		if _, _, code := runCurl(t, "--socks5-hostname", addrs.SOCKS, "http://127.0.0.1:"+hport+"/"); code == 0 {
			t.Error("a SOCKS5 client without credentials was served")
		}
	})
	t.Run("transparent-refuses-its-own-address", func(t *testing.T) {
		wantPlainClose(t, addrs.Transparent, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	})
	t.Run("status-lists-the-listeners", func(t *testing.T) {
		resp, err := http.Get("http://" + addrs.Admin + "/status.json")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{"transparent " + addrs.Transparent, "socks5 " + addrs.SOCKS} {
			if !strings.Contains(string(b), want) {
				t.Errorf("status.json lacks %q: %s", want, b)
			}
		}
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	if c, err := net.DialTimeout("tcp", addrs.SOCKS, time.Second); err == nil {
		c.Close()
		t.Error("the SOCKS5 listener still accepts after the drain")
	}
	l := logs.String()
	for _, want := range []string{`"kind":"socks5"`, `"error":"proxy_loop_detected"`, `"transparent":"` + addrs.Transparent} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %s:\n%s", want, l)
		}
	}
	if strings.Contains(l, socksPass) {
		t.Error("the SOCKS5 password reached the log")
	}
}

func TestListenTransparent(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	tests := []struct {
		name  string
		addr  string
		wants []string // host of each listener, in order
	}{
		{"ipv4-loopback-gets-its-ipv6-twin", "127.0.0.1:0", []string{"127.0.0.1", "::1"}},
		{"ipv6-loopback-gets-its-ipv4-twin", "[::1]:0", []string{"::1", "127.0.0.1"}},
		{"localhost", "localhost:0", []string{"127.0.0.1", "::1"}},
		{"other-address-is-alone", "127.0.0.1:0", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wants == nil {
				// A non-loopback address is used as given: pretend the
				// listen function is asked for exactly that.
				var asked []string
				lns, err := listenTransparent(func(n, a string) (net.Listener, error) {
					asked = append(asked, a)
					return net.Listen(n, "127.0.0.1:0")
				}, "10.0.0.1:15001", discard)
				if err != nil || len(lns) != 1 || len(asked) != 1 || asked[0] != "10.0.0.1:15001" {
					t.Fatalf("listeners %v, asked %v, err %v", lns, asked, err)
				}
				lns[0].Close()
				return
			}
			lns, err := listenTransparent(net.Listen, tc.addr, discard)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, ln := range lns {
					ln.Close()
				}
			}()
			if len(lns) == 1 && len(tc.wants) == 2 {
				t.Skipf("no IPv6 loopback here: only %s", lns[0].Addr())
			}
			var port int
			for i, ln := range lns {
				ta := ln.Addr().(*net.TCPAddr)
				if ta.IP.String() != tc.wants[i] {
					t.Errorf("listener %d on %s, want %s", i, ta.IP, tc.wants[i])
				}
				if i > 0 && ta.Port != port {
					t.Errorf("the twin listens on port %d, want %d", ta.Port, port)
				}
				port = ta.Port
			}
		})
	}
}

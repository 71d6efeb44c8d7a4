//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
	"egret.io/egret/internal/testutil/squid"
)

// Addresses of the pod-like topology (private, inside namespaces only):
//
//	pod 10.96.0.2 ── 10.96.0.1 gw 172.30.0.1 ── 172.30.0.2, .3 outside
//	    fd00:96::2     fd00:96::1  fd00:30::1     fd00:30::2
//
// 10.96.0.0/16 (and fd00:96::/64) is the "cluster range": excluded from
// redirection, direct for egret. The gw namespace forwards between its
// links (so direct traffic works) and runs Squid; the origins live outside.
const (
	podIP     = "10.96.0.2"
	gwIP      = "10.96.0.1"
	gwOutIP   = "172.30.0.1"
	gwOutIP6  = "fd00:30::1"
	outIP     = "172.30.0.2"
	outIP2    = "172.30.0.3" // egret routes it direct by CIDR
	outIP6    = "fd00:30::2"
	cluster   = "10.96.0.0/16,fd00:96::/64"
	partner   = "partner.example.test"
	partnerAP = "api.partner.example.test"

	proxyUID = 1337
	appUID   = 1000

	socksUser = "app"
	socksPass = "s0cks-p@ss"
)

// TestTransparentPod is issue 5's "done when": in a namespace prepared by
// `egret iptables apply --proxy-uid 1337 --redirect-port 15001
// --exclude-cidrs <cluster range>`, an application that knows nothing of
// proxies reaches the outside only through the upstream Squid (HTTP by
// original destination, TLS as a CONNECT to the SNI name), reaches the
// cluster range directly, egret's own connections are not redirected,
// SOCKS5 clients route the same way, and `egret iptables remove` leaves an
// empty NAT table.
func TestTransparentPod(t *testing.T) {
	netns.Require(t, "go", "curl", "openssl", "setpriv", "squid", "htpasswd", "sysctl",
		"iptables-nft-save", "iptables-nft-restore", "ip6tables-nft-save", "ip6tables-nft-restore")
	dir := sharedDir(t)
	bin := egretBin // built by TestMain
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	pod, gw, outside := netns.New(t, "pod"), netns.New(t, "gw"), netns.New(t, "outside")
	netns.Link(t, pod, gw, []string{podIP + "/24", "fd00:96::2/64"}, []string{gwIP + "/24", "fd00:96::1/64"})
	netns.Link(t, gw, outside, []string{gwOutIP + "/24", gwOutIP6 + "/64"}, []string{outIP + "/24", outIP2 + "/24", outIP6 + "/64"})
	pod.Run(t, "ip", "route", "add", "default", "via", gwIP)
	pod.Run(t, "ip", "-6", "route", "add", "default", "via", "fd00:96::1")
	outside.Run(t, "ip", "route", "add", "default", "via", gwOutIP)
	outside.Run(t, "ip", "-6", "route", "add", "default", "via", gwOutIP6)
	gw.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")

	// Origins outside (every address, IPv4 and IPv6) and one in the
	// cluster range: they answer with the address the connection came
	// from, so the path is visible.
	cert, caFile := testutil.SelfSigned(t, dir, partner, partnerAP)
	hport := serve(t, outside, "[::]:0", nil)
	tport := serve(t, outside, "[::]:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	cport := serve(t, gw, gwIP+":0", nil)

	// The upstream: Squid with Basic auth on the pod's gateway address.
	sq := squid.Start(t, squid.Options{
		User: squidUser, Password: squidPass,
		Hosts:     map[string]string{partner: outIP, partnerAP: outIP},
		Listen:    net.JoinHostPort(gwIP, freePort(t, gw, gwIP)),
		Namespace: gw,
	})

	// The init container.
	egretCmd := func(args ...string) string {
		t.Helper()
		out, err := pod.Command(ctx, append([]string{bin}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("egret %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	iptablesArgs := []string{"--proxy-uid", strconv.Itoa(proxyUID), "--redirect-port", "15001", "--exclude-cidrs", cluster, "--ipv6"}
	egretCmd(append([]string{"iptables", "apply", "--probe-addr", outIP + ":80"}, iptablesArgs...)...)

	// The sidecar, as UID 1337, credentials from the environment only.
	hostsFile := filepath.Join(dir, "hosts")
	writeFile(t, hostsFile, fmt.Sprintf("%s %s\n%s %s\n", outIP, partner, outIP, partnerAP))
	sidecar := startSidecar(t, ctx, pod, bin, []string{
		"UPSTREAM_PROXY=http://" + squidUser + ":" + squidEnc + "@" + sq.Addr,
		"DIRECT_CIDRS=" + cluster + "," + outIP2 + "/32",
		"SOCKS_USER=" + socksUser, "SOCKS_PASS=" + socksPass,
		"EGRET_HOSTS_FILE=" + hostsFile, "EGRET_DNS_SERVERS=127.0.0.1:1", // never real DNS
		"EGRET_DRAIN_PERIOD=0s", "EGRET_DRAIN_TIMEOUT=5s",
	})

	// The application: another UID, no proxy variable at all.
	app := func(t *testing.T, uid int, args ...string) string {
		t.Helper()
		cmd := pod.CommandAs(ctx, uid, uid, append([]string{"curl", "-sS", "--max-time", "10"}, args...)...)
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent"}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("curl %s as uid %d: %v: %s", strings.Join(args, " "), uid, err, stderr.String())
		}
		return stdout.String()
	}
	hp, tp, cp := strconv.Itoa(hport), strconv.Itoa(tport), strconv.Itoa(cport)
	viaSquid, viaSquid6, direct := "from "+gwOutIP, "from "+gwOutIP6, "from "+podIP

	tests := []struct {
		name     string
		uid      int
		curl     []string
		want     string // substring of the origin's answer
		squid    string // the Squid access log line part; "" = Squid must not see it
		dest     string // egret's access log dest; "" = egret must not see it
		fields   map[string]string
		openssl  string // instead of curl: openssl s_client with this SNI
		directly bool
	}{
		{
			name: "plain-http-to-outside-ip-goes-through-squid", uid: appUID,
			curl: []string{"http://" + outIP + ":" + hp + "/"}, want: viaSquid,
			squid: "CONNECT " + outIP + ":" + hp + " " + squidUser,
			dest:  outIP + ":" + hp, fields: map[string]string{"kind": "transparent", "sniffed": "http", "route": "upstream"},
		},
		{
			name: "plain-http-by-host-name-goes-through-squid-by-name", uid: appUID,
			curl: []string{"--resolve", partner + ":" + hp + ":" + outIP, "http://" + partner + ":" + hp + "/"}, want: viaSquid,
			squid: "CONNECT " + partner + ":" + hp + " " + squidUser,
			dest:  partner + ":" + hp, fields: map[string]string{"kind": "transparent", "orig_dst": outIP + ":" + hp, "route": "upstream"},
		},
		{
			name: "tls-goes-through-squid-as-connect-to-sni-name", uid: appUID,
			curl: []string{"--cacert", caFile, "--resolve", partner + ":" + tp + ":" + outIP, "https://" + partner + ":" + tp + "/"},
			want: viaSquid + " sni=" + partner, squid: "CONNECT " + partner + ":" + tp + " " + squidUser,
			dest: partner + ":" + tp, fields: map[string]string{"kind": "transparent", "sniffed": "tls", "orig_dst": outIP + ":" + tp, "route": "upstream"},
		},
		{
			name: "openssl-s-client-sni-goes-through-squid", uid: appUID, openssl: partnerAP,
			want: viaSquid + " sni=" + partnerAP, squid: "CONNECT " + partnerAP + ":" + tp + " " + squidUser,
			dest: partnerAP + ":" + tp, fields: map[string]string{"kind": "transparent", "sniffed": "tls"},
		},
		{
			name: "plain-http-to-outside-ipv6-goes-through-squid", uid: appUID,
			curl: []string{"http://[" + outIP6 + "]:" + hp + "/"}, want: viaSquid6,
			squid: "CONNECT [" + outIP6 + "]:" + hp + " " + squidUser, dest: "[" + outIP6 + "]:" + hp,
			fields: map[string]string{"kind": "transparent", "orig_dst": "[" + outIP6 + "]:" + hp, "route": "upstream"},
		},
		{
			name: "excluded-cluster-range-goes-direct", uid: appUID,
			curl: []string{"http://" + gwIP + ":" + cp + "/"}, want: direct, directly: true,
		},
		{
			name: "proxy-uid-is-not-redirected", uid: proxyUID,
			curl: []string{"http://" + outIP + ":" + hp + "/"}, want: direct, directly: true,
		},
		{
			// egret routes it direct; its own connection would loop if it
			// were redirected again.
			name: "egret-direct-route-is-not-redirected-again", uid: appUID,
			curl: []string{"http://" + outIP2 + ":" + hp + "/"}, want: direct,
			dest: outIP2 + ":" + hp, fields: map[string]string{"kind": "transparent", "route": "direct", "reason": "cidr"},
		},
		{
			name: "socks5h-name-goes-through-squid", uid: appUID,
			curl: []string{"-x", "socks5h://" + socksUser + ":" + url.QueryEscape(socksPass) + "@" + sidecar.socks, "http://" + partner + ":" + hp + "/"},
			want: viaSquid, squid: "CONNECT " + partner + ":" + hp + " " + squidUser,
			dest: partner + ":" + hp, fields: map[string]string{"kind": "socks5", "route": "upstream"},
		},
		{
			name: "socks5-outside-ip-goes-through-squid", uid: appUID,
			curl: []string{"--socks5", sidecar.socks, "--proxy-user", socksUser + ":" + socksPass, "http://" + outIP + ":" + hp + "/"},
			want: viaSquid, squid: "CONNECT " + outIP + ":" + hp + " " + squidUser,
			dest: outIP + ":" + hp, fields: map[string]string{"kind": "socks5", "route": "upstream"},
		},
		{
			name: "socks5-cluster-ip-goes-direct", uid: appUID,
			curl: []string{"--socks5", sidecar.socks, "--proxy-user", socksUser + ":" + socksPass, "http://" + gwIP + ":" + cp + "/"},
			want: direct, dest: gwIP + ":" + cp, fields: map[string]string{"kind": "socks5", "route": "direct", "reason": "cidr"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			squidBefore, logBefore := len(sq.AccessLog()), sidecar.log.Len()
			var out string
			if tc.openssl != "" {
				out = openssl(t, ctx, pod, tc.uid, outIP+":"+tp, tc.openssl, caFile)
			} else {
				out = app(t, tc.uid, tc.curl...)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("the origin answered %q, want %q", out, tc.want)
			}
			if tc.squid != "" {
				sq.WaitLog(t, tc.squid)
			} else if after := sq.AccessLog(); len(after) != squidBefore {
				t.Errorf("squid saw %v", after[squidBefore:])
			}
			if tc.dest != "" {
				line := sidecar.waitLine(t, logBefore, tc.dest)
				for k, v := range tc.fields {
					if got := fmt.Sprint(line[k]); got != v {
						t.Errorf("egret log %s = %q, want %q: %v", k, got, v, line)
					}
				}
				if n := sidecar.countLines(logBefore, tc.dest); n != 1 {
					t.Errorf("egret logged %d tunnels to %s, want 1 (a loop?)", n, tc.dest)
				}
			}
			if tc.directly {
				time.Sleep(100 * time.Millisecond)
				if n := sidecar.countLines(logBefore, ""); n != 0 {
					t.Errorf("egret saw %d connections that must not reach it:\n%s", n, sidecar.log.String()[logBefore:])
				}
			}
		})
	}

	t.Run("loop-guard-refuses-the-transparent-port-itself", func(t *testing.T) {
		off := sidecar.log.Len()
		cmd := pod.CommandAs(ctx, appUID, appUID, "curl", "-sS", "--max-time", "10", "http://127.0.0.1:15001/")
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Fatalf("curl to the transparent port itself succeeded: %s", out)
		}
		line := sidecar.waitLine(t, off, "127.0.0.1:15001")
		if line["error"] != "proxy_loop_detected" {
			t.Errorf("log %v, want error proxy_loop_detected", line)
		}
	})
	t.Run("metrics-count-transparent-and-socks5", func(t *testing.T) {
		hc := &http.Client{Transport: &http.Transport{DialContext: pod.Dial}, Timeout: 5 * time.Second}
		resp, err := hc.Get("http://" + sidecar.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			`egret_proxy_requests_total{action="upstream",kind="transparent",pool="default",reason="default",status_class="2xx"}`,
			`egret_proxy_requests_total{action="direct",kind="socks5",pool="",reason="cidr",status_class="2xx"}`,
		} {
			if !strings.Contains(string(b), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
	for _, secret := range []string{squidPass, squidEnc, socksPass} {
		if strings.Contains(sidecar.log.String(), secret) {
			t.Errorf("a password reached egret's log")
		}
	}

	sidecar.stop(t)
	t.Run("remove-restores-an-empty-nat-table", func(t *testing.T) {
		egretCmd(append([]string{"iptables", "remove"}, iptablesArgs...)...)
		for _, save := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
			if _, err := exec.LookPath(save); err != nil {
				continue
			}
			out := pod.Run(t, save, "-t", "nat")
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "-A ") || strings.Contains(l, "EGRET") {
					t.Errorf("%s still shows %q after remove:\n%s", save, l, out)
				}
			}
		}
		if out := app(t, appUID, "http://"+outIP+":"+hp+"/"); !strings.Contains(out, direct) {
			t.Errorf("without the rules the app reached the origin %q, want directly", out)
		}
	})
}

// sidecar is egret proxy running in the pod.
type sidecar struct {
	cmd          *exec.Cmd
	log          *testutil.SyncBuffer
	socks, admin string
	done         chan error
}

func startSidecar(t *testing.T, ctx context.Context, pod *netns.NS, bin string, env []string) *sidecar {
	t.Helper()
	cmd := pod.CommandAs(ctx, proxyUID, proxyUID, bin, "proxy", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--transparent-listen", "127.0.0.1:15001", "--socks-listen", "127.0.0.1:0")
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	s := &sidecar{cmd: cmd, log: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("egret proxy log:\n%s", s.log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, l := range s.lines(0) {
			if l["msg"] == "egret proxy ready" {
				s.socks, s.admin = fmt.Sprint(l["socks"]), fmt.Sprint(l["admin"])
				return s
			}
		}
		select {
		case err := <-s.done:
			t.Fatalf("egret proxy exited: %v\n%s", err, s.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("egret proxy not ready:\n%s", s.log.String())
		}
	}
}

// stop sends SIGTERM and expects a clean drain.
func (s *sidecar) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("egret proxy exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("egret proxy did not stop on SIGTERM")
	}
}

func (s *sidecar) lines(off int) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(s.log.String()[off:], "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// countLines counts access log lines after off for dest ("" = any).
func (s *sidecar) countLines(off int, dest string) int {
	n := 0
	for _, l := range s.lines(off) {
		if l["msg"] == "tunnel" && (dest == "" || l["dest"] == dest) {
			n++
		}
	}
	return n
}

func (s *sidecar) waitLine(t *testing.T, off int, dest string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, l := range s.lines(off) {
			if l["msg"] == "tunnel" && l["dest"] == dest {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("egret logged no tunnel to %s:\n%s", dest, s.log.String()[off:])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openssl runs `openssl s_client` as uid with SNI name, sends one request
// and returns the answer.
func openssl(t *testing.T, ctx context.Context, pod *netns.NS, uid int, addr, name, caFile string) string {
	t.Helper()
	cmd := pod.CommandAs(ctx, uid, uid, "openssl", "s_client", "-connect", addr, "-servername", name,
		"-CAfile", caFile, "-verify_return_error", "-verify_hostname", name, "-quiet", "-ign_eof")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	cmd.Stdin = strings.NewReader("GET / HTTP/1.1\r\nHost: " + name + "\r\nConnection: close\r\n\r\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("openssl s_client -servername %s: %v: %s", name, err, stderr.String())
	}
	return stdout.String()
}

// serve answers HTTP (or HTTPS with tc) on addr inside ns with
// "from <client address>" and, for TLS, " sni=<server name>".
func serve(t *testing.T, ns *netns.NS, addr string, tc *tls.Config) int {
	t.Helper()
	ln, err := ns.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "from %s", host)
		if r.TLS != nil {
			fmt.Fprintf(w, " sni=%s", r.TLS.ServerName)
		}
		fmt.Fprintln(w)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// freePort returns a port free on ip inside ns.
func freePort(t *testing.T, ns *netns.NS, ip string) string {
	t.Helper()
	port, err := testutil.PickPort(testutil.ListenCheck(ns.Listen, ip))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// sharedDir is a temporary directory every UID can read (the binary, the
// CA file and the hosts file are used by UIDs 1337 and 1000).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "egret-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

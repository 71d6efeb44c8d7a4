package proxyd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/secretvol"
	"egret.io/egret/internal/testutil/squid"
)

// egret is a running `egret proxy` built from a configuration the way the
// command builds it (config.Load, then Run).
type egret struct {
	Proxy, Admin string
	SOCKS        string // when SOCKS_LISTEN_ADDR is set
	Log          *testutil.SyncBuffer
	ConfigFile   string         // the YAML file, as the command watches it
	Hangup       chan os.Signal // SIGHUP, as the command delivers it
}

// runEgret starts Run with env (nothing else of the process environment)
// and an optional YAML config file; names resolve from hosts only.
func runEgret(t *testing.T, env map[string]string, yaml string, hosts map[string]string) *egret {
	t.Helper()
	dir := t.TempDir()
	var hb strings.Builder
	for n, a := range hosts {
		fmt.Fprintf(&hb, "%s %s\n", a, n)
	}
	hostsFile := filepath.Join(dir, "hosts")
	os.WriteFile(hostsFile, []byte(hb.String()), 0o644)
	e := map[string]string{
		"LISTEN_ADDR": "127.0.0.1:0", "ADMIN_LISTEN_ADDR": "127.0.0.1:0", "EGRET_VIA": "egret-test",
		"EGRET_HOSTS_FILE": hostsFile, "EGRET_DRAIN_PERIOD": "0", "EGRET_DRAIN_TIMEOUT": "1s",
		// Names never reach real DNS: a server that does not exist.
		"EGRET_DNS_SERVERS": "127.0.0.1:1",
	}
	for k, v := range env {
		e[k] = v
	}
	src := config.Sources{Env: func(k string) (string, bool) { v, ok := e[k]; return v, ok }, DefaultCredentialsDir: "-"}
	if yaml != "" {
		src.File = filepath.Join(dir, "egret.yaml")
		os.WriteFile(src.File, []byte(yaml), 0o644)
	}
	cfg, err := config.Load(src)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logs := &testutil.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan Addrs, 1)
	done := make(chan error, 1)
	hup := make(chan os.Signal, 1)
	// Reload, ConfigFile and Hangup as egret proxy gives them.
	go func() {
		done <- Run(ctx, cfg, Options{Version: "test", AccessLog: logs, Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Started: func(a Addrs) { started <- a },
			Reload:  func() (*config.Proxy, error) { return config.Load(src) }, ConfigFile: src.File, Hangup: hup})
	}()
	var a Addrs
	select {
	case a = <-started:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("egret did not start")
	}
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("egret log:\n%s", logs.String())
		}
	})
	return &egret{Proxy: a.Proxy, Admin: a.Admin, SOCKS: a.SOCKS, Log: logs, ConfigFile: src.File, Hangup: hup}
}

func (e *egret) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + e.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestPoolServesThroughBadMembers is the acceptance test: a pool of
// three real Squids — one with the wrong password (407), one stopped in the
// middle of the test, one healthy — serves 40 HTTP requests and 40 CONNECT
// tunnels from curl without a single failure.
func TestPoolServesThroughBadMembers(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok "+r.URL.Path)
	}))
	hosts := map[string]string{"partner.test": "127.0.0.1"}
	wrong := squid.Start(t, squid.Options{User: squidUser, Password: "not-what-egret-has", Hosts: hosts})
	stopped := squid.Start(t, squid.Options{User: squidUser, Password: squidPass, Hosts: hosts})
	healthy := squid.Start(t, squid.Options{User: squidUser, Password: squidPass, Hosts: hosts})
	member := func(s *squid.Squid) string { return "http://" + squidUser + ":" + encPass + "@" + s.Addr }
	e := runEgret(t, map[string]string{
		"UPSTREAM_PROXY": strings.Join([]string{member(wrong), member(stopped), member(healthy)}, ","),
	}, "", nil)
	for i := 0; i < 40; i++ {
		if i == 20 {
			stopped.Stop()
		}
		for _, tunnel := range []bool{false, true} {
			code, body, err := curl(t, e.Proxy, fmt.Sprintf("http://partner.test:%s/r%d", port, i), tunnel)
			if err != nil || code != "200" || body != fmt.Sprintf("ok /r%d", i) {
				t.Fatalf("request %d (tunnel %v): %v %s %q", i, tunnel, err, code, body)
			}
		}
	}
	if n := hits.Load(); n != 80 {
		t.Errorf("origin saw %d requests, want 80", n)
	}
	if n := len(stopped.AccessLog()); n == 0 {
		t.Error("the member stopped mid-test served nothing before it stopped")
	}
	if n := strings.Count(strings.Join(wrong.AccessLog(), "\n"), "TCP_DENIED/407"); n == 0 || n > 6 {
		t.Errorf("the member with the wrong password saw %d attempts: want a few, then back-off", n)
	}
	mt := e.metrics(t)
	for _, want := range []string{
		`egret_upstream_member_up{member="http://` + wrong.Addr + `",pool="default"} 0`,
		`egret_upstream_member_up{member="http://` + stopped.Addr + `",pool="default"} 0`,
		`egret_upstream_member_up{member="http://` + healthy.Addr + `",pool="default"} 1`,
		`egret_upstream_members{pool="default",state="healthy"} 1`,
		`egret_upstream_responses_total{code="407",member="http://` + wrong.Addr + `",pool="default"}`,
	} {
		if !strings.Contains(mt, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if log := e.Log.String(); strings.Contains(log, squidPass) || strings.Contains(log, encPass) || strings.Contains(mt, encPass) {
		t.Error("the password reached the log or the metrics")
	}
}

// TestFailClosed: deny rules answer 403 and a dead pool 502/503, both with
// Proxy-Status, and the origin sees nothing (no fallback to direct).
func TestFailClosed(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	tport := tcpOrigin(t, func(c net.Conn) { hits.Add(1) })
	deadA, deadB := deadAddr(t), deadAddr(t)
	e := runEgret(t, map[string]string{
		"UPSTREAM_PROXY": "http://" + deadA + ",http://" + deadB,
		"DENY_SUFFIXES":  ".blocked.test",
		"DENY_CIDRS":     "10.66.0.0/16",
		"DIRECT_HOSTS":   "direct.test",
	}, "", map[string]string{"partner.test": "127.0.0.1", "api.blocked.test": "127.0.0.1", "inside.test": "10.66.1.2", "direct.test": "127.0.0.1"})
	req := func(method, target string) string {
		if method == "CONNECT" {
			return "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n"
		}
		return "GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\n\r\n"
	}
	tests := []struct {
		name, method, target string
		code                 []int
		errType              string
	}{
		{"deny-suffix-http", "GET", "api.blocked.test:" + port, []int{403}, "http_request_denied"},
		{"deny-suffix-connect", "CONNECT", "api.blocked.test:" + tport, []int{403}, "http_request_denied"},
		{"deny-resolved-cidr", "CONNECT", "inside.test:" + tport, []int{403}, "http_request_denied"},
		{"dead-pool-connect", "CONNECT", "partner.test:" + tport, []int{502}, "connection_refused"},
		// Every member is down now: the pool still tries the one due back
		// first, answers with its real error, and never goes direct.
		{"dead-pool-http-last-resort", "GET", "partner.test:" + port, []int{502}, "connection_refused"},
		{"dead-pool-connect-last-resort", "CONNECT", "partner.test:" + tport, []int{502}, "connection_refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, e.Proxy, req(tt.method, tt.target))
			wantProxyStatus(t, resp, body, tt.code[0], tt.errType)
		})
	}
	time.Sleep(100 * time.Millisecond)
	if n := hits.Load(); n != 0 {
		t.Fatalf("the origin saw %d connections: something went direct", n)
	}
	// The direct rule still works: the origin is reachable when allowed.
	resp, _ := rawRequest(t, e.Proxy, req("GET", "direct.test:"+port))
	if resp.StatusCode != 200 || hits.Load() != 1 {
		t.Errorf("direct rule: %d, hits %d", resp.StatusCode, hits.Load())
	}
	mt := e.metrics(t)
	if !strings.Contains(mt, `egret_proxy_policy_denials_total{policy="route"} 3`) {
		t.Errorf("denials not counted:\n%s", grep(mt, "denials"))
	}
}

// TestCredentialRotationKubelet rotates the Secret mounted at
// PROXY_CREDENTIALS_DIR the way the kubelet does (..data symlink swap) in
// front of a real Squid and checks: a fix takes effect within seconds in
// the same process; a new password the provider does not accept yet causes
// no failure (the previous one is kept as a fallback); once the provider
// accepts it, it is used alone.
func TestCredentialRotationKubelet(t *testing.T) {
	var hits atomic.Int32
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); io.WriteString(w, "ok") }))
	sq := squid.Start(t, squid.Options{User: squidUser, Password: "pw-one", Hosts: map[string]string{"partner.test": "127.0.0.1"},
		Extra: "auth_param basic credentialsttl 1 second"})
	vol := secretvol.New(t, map[string]string{"username": squidUser, "password": "wrong-at-start"})
	e := runEgret(t, map[string]string{
		"UPSTREAM_PROXY":        "http://" + sq.Addr,
		"PROXY_CREDENTIALS_DIR": vol.Dir,
		// The periodic re-read is far off: fsnotify must see the swap.
		"EGRET_CREDENTIALS_CHECK_INTERVAL": "1h",
	}, "", nil)
	get := func(tunnel bool) string {
		code, _, _ := curl(t, e.Proxy, "http://partner.test:"+port+"/", tunnel)
		return code
	}
	if code := get(false); code != "502" {
		t.Fatalf("with the wrong password: %s, want 502", code)
	}
	// The fix: swap the Secret kubelet-style.
	start := time.Now()
	vol.Update(t, map[string]string{"username": squidUser, "password": "pw-one"})
	for get(false) != "200" {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the fixed credential did not take effect within 5s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("fixed credential in effect after %v", time.Since(start).Round(time.Millisecond))

	// Rotation: the Secret gets pw-two before Squid accepts it.
	vol.Update(t, map[string]string{"username": squidUser, "password": "pw-two"})
	waitFor(t, func() bool {
		return strings.Contains(e.Log.String(), "upstream credentials reloaded") && strings.Count(e.Log.String(), "upstream credentials reloaded") >= 2
	})
	for i := 0; i < 5; i++ {
		for _, tunnel := range []bool{false, true} {
			if code := get(tunnel); code != "200" {
				t.Fatalf("during the rotation (tunnel %v): %s", tunnel, code)
			}
		}
	}
	if mt := e.metrics(t); !strings.Contains(mt, `egret_credentials_fallbacks_total{pool="default"}`) {
		t.Error("fallbacks not counted")
	}
	// The provider switches to pw-two: the new credential works and the old
	// one is retired.
	sq.SetPassword(t, squidUser, "pw-two")
	time.Sleep(1100 * time.Millisecond) // Squid's credentialsttl
	for i := 0; i < 3; i++ {
		for _, tunnel := range []bool{false, true} {
			if code := get(tunnel); code != "200" {
				t.Fatalf("after the provider switched (tunnel %v): %s", tunnel, code)
			}
		}
	}
	resp, err := http.Get("http://" + e.Admin + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"rotating": false`) {
		t.Errorf("the rotation did not complete:\n%s", b)
	}
	all := e.Log.String() + e.metrics(t) + string(b)
	for _, pw := range []string{"pw-one", "pw-two", "wrong-at-start"} {
		if strings.Contains(all, pw) {
			t.Errorf("password %q reached the log, metrics or status", pw)
		}
	}
	if mt := e.metrics(t); !strings.Contains(mt, `egret_config_reloads_total{result="ok",what="credentials"} 2`) {
		t.Errorf("reloads:\n%s", grep(mt, "reloads"))
	}
}

// TestMembersFileReload: the default pool's members come from a file that
// is swapped kubelet-style; the new member takes over within seconds.
func TestMembersFileReload(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	hosts := map[string]string{"partner.test": "127.0.0.1"}
	a := squid.Start(t, squid.Options{Hosts: hosts})
	b := squid.Start(t, squid.Options{Hosts: hosts})
	vol := secretvol.New(t, map[string]string{"members": "http://" + a.Addr + "\n"})
	e := runEgret(t, map[string]string{"EGRET_UPSTREAM_FILE": filepath.Join(vol.Dir, "members"), "DEFAULT_ROUTE": "upstream"}, "", nil)
	if code, _, _ := curl(t, e.Proxy, "http://partner.test:"+port+"/one", false); code != "200" {
		t.Fatalf("first request: %s", code)
	}
	a.WaitLog(t, "/one")
	vol.Update(t, map[string]string{"members": "# moved\nhttp://" + b.Addr + " weight=2\n"})
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		code, _, _ := curl(t, e.Proxy, fmt.Sprintf("http://partner.test:%s/two-%d", port, i), false)
		if code != "200" {
			t.Fatalf("request during the change: %s", code)
		}
		if strings.Contains(strings.Join(b.AccessLog(), "\n"), fmt.Sprintf("/two-%d", i)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new member file did not take effect within 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if mt := e.metrics(t); !strings.Contains(mt, `egret_config_reloads_total{result="ok",what="members"} 1`) {
		t.Errorf("reloads:\n%s", grep(mt, "reloads"))
	}
}

// TestReadinessFollowsThePool: a gateway is not ready while every member
// of a pool its routes use is down (load balancers then steer clients to
// replicas that can serve); a sidecar stays ready, so an egress outage does
// not take the app's pod out of its own Service.
func TestReadinessFollowsThePool(t *testing.T) {
	dead := deadAddr(t)
	readyz := func(admin string) (int, string) {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		role      string
		wantAfter int
	}{{"gateway", 503}, {"sidecar", 200}} {
		t.Run(tc.role, func(t *testing.T) {
			e := runEgret(t, map[string]string{"EGRET_ROLE": tc.role, "UPSTREAM_PROXY": "http://" + dead, "EGRET_SSRF_GUARD": "false"}, "", map[string]string{"partner.test": "127.0.0.1"})
			if code, body := readyz(e.Admin); code != 200 {
				t.Fatalf("before any failure: %d %s", code, body)
			}
			rawRequest(t, e.Proxy, "CONNECT partner.test:443 HTTP/1.1\r\nHost: x\r\n\r\n")
			code, body := readyz(e.Admin)
			if code != tc.wantAfter {
				t.Fatalf("after the only member failed: %d %q, want %d", code, body, tc.wantAfter)
			}
			if code == 503 && !strings.Contains(body, "every member of pool default is down") {
				t.Errorf("readyz does not say why: %q", body)
			}
		})
	}
}

// silentMember accepts connections, reads what it is sent and never
// answers: an upstream that hangs.
func silentMember(t *testing.T) string {
	addr, _ := countedSilentMember(t)
	return addr
}

// countedSilentMember is silentMember that also counts the connections it
// accepted.
func countedSilentMember(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	return ln.Addr().String(), &n
}

// TestSilentMemberIsBlamed: a member that accepts and never answers is
// skipped once its timeout passes — idempotent requests and CONNECT go on
// to the next member (a real Squid) — and marked down because that member
// answered in its place; when no member answers, the destination is the
// slow one and nobody is blamed; a POST is never sent twice (issue 11).
func TestSilentMemberIsBlamed(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.URL.Path) }))
	hosts := map[string]string{"partner.test": "127.0.0.1"}
	sq := squid.Start(t, squid.Options{User: squidUser, Password: squidPass, Hosts: hosts})
	good := "http://" + squidUser + ":" + encPass + "@" + sq.Addr
	env := func(members ...string) map[string]string {
		return map[string]string{"UPSTREAM_PROXY": strings.Join(members, ","), "EGRET_RESPONSE_HEADER_TIMEOUT": "400ms",
			"EGRET_UPSTREAM_CONNECT_TIMEOUT": "400ms", "EGRET_UPSTREAM_POLICY": "round_robin"}
	}
	up := func(mt, addr, v string) bool {
		return strings.Contains(mt, `egret_upstream_member_up{member="http://`+addr+`",pool="default"} `+v)
	}
	for _, tunnel := range []bool{false, true} {
		t.Run(fmt.Sprintf("tunnel-%v", tunnel), func(t *testing.T) {
			silent, accepted := countedSilentMember(t)
			e := runEgret(t, env("http://"+silent, good), "", nil)
			start := time.Now()
			code, body, err := curl(t, e.Proxy, "http://partner.test:"+port+"/first", tunnel)
			if err != nil || code != "200" || body != "ok /first" {
				t.Fatalf("first request: %v %s %q", err, code, body)
			}
			if d := time.Since(start); d < 400*time.Millisecond {
				t.Fatalf("the first request took %v: it did not try the silent member first", d)
			}
			mt := e.metrics(t)
			if !up(mt, silent, "0") || !up(mt, sq.Addr, "1") {
				t.Fatalf("the silent member is not blamed:\n%s", grep(mt, "egret_upstream_member_up"))
			}
			// Not by the clock (a loaded runner under -race may take
			// 300 ms for a request): the silent member sees no new
			// connection.
			before := accepted.Load()
			if code, _, _ := curl(t, e.Proxy, "http://partner.test:"+port+"/second", tunnel); code != "200" {
				t.Fatalf("second request: %s", code)
			}
			if n := accepted.Load() - before; n != 0 {
				t.Errorf("the silent member was tried again (%d new connections)", n)
			}
		})
	}
	t.Run("nobody-answers", func(t *testing.T) {
		a, b := silentMember(t), silentMember(t)
		e := runEgret(t, env("http://"+a, "http://"+b), "", nil)
		code, _, _ := curl(t, e.Proxy, "http://partner.test:"+port+"/", false)
		if code != "504" {
			t.Fatalf("no member answers: %s, want 504", code)
		}
		if mt := e.metrics(t); !up(mt, a, "1") || !up(mt, b, "1") {
			t.Errorf("a member was blamed for a destination nobody reached:\n%s", grep(mt, "egret_upstream_member_up"))
		}
	})
	t.Run("post-is-not-repeated", func(t *testing.T) {
		silent := silentMember(t)
		e := runEgret(t, env("http://"+silent, good), "", nil)
		c := dialRaw(t, e.Proxy)
		c.Send("POST http://partner.test:%s/pay HTTP/1.1\r\nHost: partner.test\r\nContent-Length: 2\r\n\r\nhi", port)
		resp, body := c.Read("POST")
		wantProxyStatus(t, resp, body, http.StatusGatewayTimeout, "connection_read_timeout")
		if n := strings.Count(strings.Join(sq.AccessLog(), "\n"), "/pay"); n != 0 {
			t.Errorf("the POST reached the second member too (%d times)", n)
		}
	})
}

// TestMemberNameFromEgretResolver: a member named by a host name is looked
// up with egret's resolver (EGRET_HOSTS_FILE here; EGRET_DNS_SERVERS
// alike), as every other name egret dials, not with the system's, which
// does not know it (issue 24 leftover).
func TestMemberNameFromEgretResolver(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.URL.Path) }))
	hosts := map[string]string{"partner.test": "127.0.0.1"}
	sq := squid.Start(t, squid.Options{User: squidUser, Password: squidPass, Hosts: hosts})
	_, sqPort, _ := net.SplitHostPort(sq.Addr)
	e := runEgret(t, map[string]string{"UPSTREAM_PROXY": "http://" + squidUser + ":" + encPass + "@corp-proxy.egret-hosts.test:" + sqPort},
		"", map[string]string{"partner.test": "127.0.0.1", "corp-proxy.egret-hosts.test": "127.0.0.1"})
	for _, tunnel := range []bool{false, true} {
		path := fmt.Sprintf("/named-member-%v", tunnel)
		code, body, err := curl(t, e.Proxy, "http://partner.test:"+port+path, tunnel)
		if err != nil || code != "200" || body != "ok "+path {
			t.Fatalf("through the member named in the hosts file (tunnel %v): %v %s %q", tunnel, err, code, body)
		}
	}
	sq.WaitLog(t, "/named-member-false")
	sq.WaitLog(t, "CONNECT partner.test:"+port)
}

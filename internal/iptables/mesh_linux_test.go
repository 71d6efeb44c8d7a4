//go:build linux

package iptables_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/iptables"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
)

// The rule sets the meshes' init containers write, reproduced from their
// documentation and generated output (not their code) in restore form:
// istio-iptables in its default REDIRECT mode (envoy runs as UID and GID
// 1337, outbound capture on 15001, inbound on 15006, its own ports
// 15008/15090/15021/15020 exempt from inbound capture), and
// linkerd-proxy-init with its chart's defaults (linkerd2-proxy runs as UID
// 2102, outbound capture on 4140, inbound on 4143, its control and admin
// ports 4190/4191 and the chart's ignored outbound ports 4567/4568 exempt).
const (
	istioRules = `*nat
:ISTIO_INBOUND - [0:0]
:ISTIO_IN_REDIRECT - [0:0]
:ISTIO_OUTPUT - [0:0]
:ISTIO_REDIRECT - [0:0]
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A OUTPUT -p tcp -j ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN
-A ISTIO_INBOUND -p tcp --dport 15090 -j RETURN
-A ISTIO_INBOUND -p tcp --dport 15021 -j RETURN
-A ISTIO_INBOUND -p tcp --dport 15020 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
COMMIT
`
	linkerdRules = `*nat
:PROXY_INIT_REDIRECT - [0:0]
:PROXY_INIT_OUTPUT - [0:0]
-A PREROUTING -j PROXY_INIT_REDIRECT
-A PROXY_INIT_REDIRECT -p tcp -m multiport --dports 4190,4191 -j RETURN
-A PROXY_INIT_REDIRECT -p tcp -j REDIRECT --to-ports 4143
-A OUTPUT -j PROXY_INIT_OUTPUT
-A PROXY_INIT_OUTPUT -m owner --uid-owner 2102 -j RETURN
-A PROXY_INIT_OUTPUT -o lo -j RETURN
-A PROXY_INIT_OUTPUT -p tcp -m multiport --dports 4567,4568 -j RETURN
-A PROXY_INIT_OUTPUT -p tcp -j REDIRECT --to-ports 4140
COMMIT
`
	egretPort = 15002 // egret's transparent port beside a mesh (15001 is envoy's)
	egretUID  = 1500  // egret's sidecar UID beside a mesh (1337 is envoy's)
	appUID    = 1000
)

// redirectCounter matches a REDIRECT rule's packet counter in
// `iptables-save -c` output.
var redirectCounter = regexp.MustCompile(`(?m)^\[(\d+):\d+\] -A \S+ .*-j REDIRECT --to-ports (\d+)`)

// TestMeshRuleOrdering applies a mesh's real rule set and egret's rules in
// one pod namespace, in both orders, and makes one connection from the
// application's, the mesh proxy's and egret's UID: the REDIRECT rule that
// counted it says which proxy captured it ("" = none, it left directly).
// It shows the shapes docs/mesh.md describes: with egret at envoy's UID
// 1337 the mesh's traffic escapes egret silently; egret after the mesh
// without exempting the mesh's UID sends its own traffic back into the
// mesh (a loop); egret first, at its own UID, exempting the mesh's (its
// GID here), gives app → egret → mesh → out; with Linkerd first egret sees
// nothing at all.
func TestMeshRuleOrdering(t *testing.T) {
	b := iptables.BackendNFT
	requireIptables(t, b, iptables.IPv4)
	netns.Require(t, "curl", "setpriv")
	type conn struct {
		uid, gid int
		want     string // the port of the REDIRECT that captured it, "" for none
	}
	tests := []struct {
		name       string
		mesh       string
		egret      iptables.Spec
		egretFirst bool
		conns      map[string]conn
	}{
		{name: "istio-first-egret-at-envoys-uid", mesh: istioRules,
			egret: iptables.Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: egretPort},
			conns: map[string]conn{"app": {appUID, appUID, "15001"}, "mesh": {1337, 1337, ""}}},
		{name: "istio-first-egret-own-uid-no-mesh-exemption", mesh: istioRules,
			egret: iptables.Spec{ProxyUID: egretUID, ProxyGID: -1, RedirectPort: egretPort},
			conns: map[string]conn{"app": {appUID, appUID, "15001"}, "mesh": {1337, 1337, "15002"}, "egret": {egretUID, egretUID, "15001"}}},
		{name: "egret-first-own-uid-mesh-exempt", mesh: istioRules, egretFirst: true,
			egret: iptables.Spec{ProxyUID: egretUID, ProxyGID: 1337, RedirectPort: egretPort},
			conns: map[string]conn{"app": {appUID, appUID, "15002"}, "egret": {egretUID, egretUID, "15001"}, "mesh": {1337, 1337, ""}}},
		{name: "linkerd-first-egret-own-uid-mesh-exempt", mesh: linkerdRules,
			egret: iptables.Spec{ProxyUID: egretUID, ProxyGID: 2102, RedirectPort: egretPort},
			conns: map[string]conn{"app": {appUID, appUID, "4140"}, "mesh": {2102, 2102, ""}, "egret": {egretUID, egretUID, "4140"}}},
		{name: "egret-first-linkerd-exempt", mesh: linkerdRules, egretFirst: true,
			egret: iptables.Spec{ProxyUID: egretUID, ProxyGID: 2102, RedirectPort: egretPort},
			conns: map[string]conn{"app": {appUID, appUID, "15002"}, "egret": {egretUID, egretUID, "4140"}, "mesh": {2102, 2102, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pod, outside := netns.New(t, "mesh-pod"), netns.New(t, "mesh-out")
			netns.Link(t, pod, outside, []string{"10.253.0.1/24"}, []string{"10.253.0.2/24"})
			ln, err := outside.Listen("tcp", "10.253.0.2:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go serveHTTP(ln, func(net.Conn) string { return "outside" })
			url := "http://10.253.0.2:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + "/"

			c, err := tt.egret.Compile()
			if err != nil {
				t.Fatal(err)
			}
			m := &iptables.Manager{Runner: runner(pod), Backend: b}
			restoreMesh := func() {
				cmd := pod.Command(ctx, b.Restore(iptables.IPv4), "--noflush")
				cmd.Stdin = strings.NewReader(tt.mesh)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("mesh rules: %v: %s", err, out)
				}
			}
			if !tt.egretFirst {
				restoreMesh()
			}
			if _, err := m.Apply(ctx, c); err != nil {
				t.Fatal(err)
			}
			if tt.egretFirst {
				restoreMesh()
			}
			for who, cn := range tt.conns {
				pod.Run(t, strings.TrimSuffix(b.Save(iptables.IPv4), "-save"), "-t", "nat", "-Z")
				cmd := pod.CommandAs(ctx, cn.uid, cn.gid, "curl", "-s", "-o", "/dev/null", "--noproxy", "*", "--max-time", "3", url)
				err := cmd.Run()
				var ee *exec.ExitError
				if err != nil && !errorsAs(err, &ee) {
					t.Fatal(err)
				}
				save := pod.Run(t, b.Save(iptables.IPv4), "-c", "-t", "nat")
				got := ""
				for _, m := range redirectCounter.FindAllStringSubmatch(save, -1) {
					if m[1] != "0" {
						got += m[2]
					}
				}
				if got != cn.want {
					what := map[string]string{"": "nobody (direct)", "15001": "envoy", "15002": "egret", "4140": "linkerd2-proxy"}
					t.Errorf("%s's connection (uid %d) captured by %s, want %s\n%s", who, cn.uid, what[got], what[cn.want], save)
				}
				if cn.want == "" && err != nil {
					t.Errorf("%s's connection should leave directly, but curl failed: %v", who, err)
				}
			}
		})
	}
}

func errorsAs(err error, target **exec.ExitError) bool {
	ee, ok := err.(*exec.ExitError)
	if ok {
		*target = ee
	}
	return ok
}

// TestMeshEgressChainAndLoop is docs/mesh.md's second shape with real egret
// processes in a namespace: a mesh egress gateway (an egret named
// mesh-egress stands in for it) whose upstream is the egret gateway reaches
// the origin with both names in Via; and when the egret gateway's upstream
// points back at the mesh's egress (a misconfiguration), the request comes
// back to egret, which finds its own name in Via and answers 508 with
// Proxy-Status proxy_loop_detected instead of circling.
func TestMeshEgressChainAndLoop(t *testing.T) {
	netns.Require(t, "curl")
	bin := testutil.BuildEgret(t)
	ns := netns.New(t, "mesh-chain")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The origin is not on a loopback address: egret sends loopback
	// destinations direct, never to an upstream.
	ns.Run(t, "ip", "addr", "add", "10.254.0.9/32", "dev", "lo")
	origin, err := ns.Listen("tcp", "10.254.0.9:0")
	if err != nil {
		t.Fatal(err)
	}
	defer origin.Close()
	go serveHTTPRequest(origin, func(r *http.Request) string { return "via=" + strings.Join(r.Header.Values("Via"), ", ") })
	originURL := "http://" + origin.Addr().String() + "/"

	start := func(t *testing.T, via, listen, admin, upstream string) {
		t.Helper()
		cmd := ns.Command(ctx, bin, "proxy", "--listen", listen, "--admin-listen", admin, "--via", via)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if upstream != "" {
			cmd.Env = append(cmd.Env, "UPSTREAM_PROXY="+upstream)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitListening(t, ns, listen)
	}
	curl := func(t *testing.T, proxy, url string) string {
		t.Helper()
		out, err := ns.Command(ctx, "curl", "-s", "-i", "--max-time", "10", "-x", proxy, url).Output()
		if err != nil {
			t.Fatalf("curl -x %s %s: %v", proxy, url, err)
		}
		return string(out)
	}

	t.Run("mesh-egress-chained-to-egret", func(t *testing.T) {
		start(t, "egret-gw", "127.0.0.1:3128", "127.0.0.1:9901", "")
		start(t, "mesh-egress", "127.0.0.1:3129", "127.0.0.1:9902", "http://127.0.0.1:3128")
		out := curl(t, "http://127.0.0.1:3129", originURL)
		if !strings.HasPrefix(out, "HTTP/1.1 200") || !strings.Contains(out, "mesh-egress") || !strings.Contains(out, "egret-gw") {
			t.Fatalf("through mesh-egress then egret-gw: %q, want 200 with both in Via", out)
		}
		if !strings.Contains(out, "via=1.1 mesh-egress (egret), 1.1 egret-gw (egret)") {
			t.Errorf("the origin saw Via %q, want mesh-egress first, then egret-gw", out)
		}
	})
	t.Run("loop-is-detected", func(t *testing.T) {
		start(t, "egret-gw", "127.0.0.1:3138", "127.0.0.1:9911", "http://127.0.0.1:3139")
		start(t, "mesh-egress", "127.0.0.1:3139", "127.0.0.1:9912", "http://127.0.0.1:3138")
		out := curl(t, "http://127.0.0.1:3138", originURL)
		if !strings.Contains(out, "508") || !strings.Contains(out, "proxy_loop_detected") {
			t.Fatalf("a request sent round the loop: %q, want 508 with Proxy-Status proxy_loop_detected", out)
		}
	})
}

// serveHTTPRequest answers each request on ln with body(request).
func serveHTTPRequest(ln net.Listener, body func(*http.Request) string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			r, err := http.ReadRequest(bufio.NewReader(c))
			if err != nil {
				return
			}
			b := body(r) + "\n"
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(b), b)
		}()
	}
}

// waitListening waits until addr accepts connections in ns.
func waitListening(t *testing.T, ns *netns.NS, addr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := ns.Dial(ctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

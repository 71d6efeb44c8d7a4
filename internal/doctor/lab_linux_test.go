//go:build linux

package doctor

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"egret.io/egret/internal/echo"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil/netns"
	"egret.io/egret/internal/testutil/squid"
	"egret.io/egret/internal/upstream"
)

// The lab: a pod, a gateway host and the internet, each a network
// namespace this test creates, with private addresses it assigns.
//
//	pod 10.77.1.2 ──veth── 10.77.1.1 gw 10.77.2.1 ──veth── 10.77.2.2 inet
//	                        (forwards; lo: 10.96.0.1 "kubernetes",
//	                         blackhole 10.66.0.0/24)
//
// The gateway namespace runs egret gateways (in-process internal/proxy,
// dialing from the gateway namespace) and a real Squid with Basic auth; the
// internet runs an `egret echo`; the pod runs the DNS server the doctor's
// resolver asks (names never reach real DNS) and, for some cases, an egret
// sidecar on its loopback.
const (
	podIP       = "10.77.1.2"
	gwPodSideIP = "10.77.1.1"
	gwInetIP    = "10.77.2.1"
	inetIP      = "10.77.2.2"
	apiIP       = "10.96.0.1"   // the kubernetes Service's ClusterIP, on gw's loopback
	holeIP      = "10.66.0.5"   // black-holed in gw: SYNs vanish
	holeSvcIP   = "10.66.0.9"   // a "Service" behind a dropping NetworkPolicy
	squidUser   = "alice"       // Squid's user
	squidPass   = "s3cret-Pa55" // Squid's password; must never appear in a report
	wrongPass   = "Wr0ng-Pa55"  // a wrong one; must never appear either
	resolvText  = "search shop.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
	// IPv6 beside IPv4 on both links (the dual-stack cases).
	podIP6       = "fd77:1::2"
	gwPodSideIP6 = "fd77:1::1"
	gwInetIP6    = "fd77:2::1"
	inetIP6      = "fd77:2::2"
	forbiddenIP  = "10.77.2.3" // on inet; the pod's direct path to it is prohibited in gw
	leakyIP      = "10.77.2.4" // on inet; reachable directly (a forbidden target nobody blocked)
	fullNoProxy  = "localhost,127.0.0.1,::1,[::1],.svc,.cluster.local,kubernetes,kubernetes.default,kubernetes.default.svc,kubernetes.default.svc.cluster.local,169.254.169.254," + apiIP
)

type lab struct {
	pod, gw, inet *netns.NS
	dnsAddr       string // the DNS server, inside the pod namespace
	resolvConf    string
	echoURL       string // http://echo.example.test:PORT/
	deadEchoPort  string // a closed port on the echo host
	apiPort       string // the "kubernetes" HTTPS-less API stand-in on apiIP
	gateway       string // egret gateway host:port (by Service name)
	denyGateway   string // egret gateway that denies the echo host
	deadPort      string // a closed port on the gateway host
	squid         string // squid host:port (by Service name)
	sidecar       string // egret sidecar on the pod's loopback, wrong upstream password
	dualPort      string // the dual-stack echo's port on every inet address
	policyGateway string // egret gateway that denies forbidden. and leaky.example.test
}

func newLab(t *testing.T) *lab {
	t.Helper()
	netns.Require(t, "squid", "htpasswd")
	l := &lab{pod: netns.New(t, "dr-pod"), gw: netns.New(t, "dr-gw"), inet: netns.New(t, "dr-inet")}
	netns.Link(t, l.pod, l.gw, []string{podIP + "/24", podIP6 + "/64"}, []string{gwPodSideIP + "/24", gwPodSideIP6 + "/64"})
	_, inetIf := netns.Link(t, l.gw, l.inet, []string{gwInetIP + "/24", gwInetIP6 + "/64"}, []string{inetIP + "/24", inetIP6 + "/64", forbiddenIP + "/32", leakyIP + "/32"})
	l.pod.Run(t, "ip", "route", "add", "default", "via", gwPodSideIP)
	l.pod.Run(t, "ip", "-6", "route", "add", "default", "via", gwPodSideIP6)
	l.inet.Run(t, "ip", "route", "add", "default", "via", gwInetIP)
	l.inet.Run(t, "ip", "-6", "route", "add", "default", "via", gwInetIP6, "dev", inetIf)
	l.gw.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	l.gw.Run(t, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	// The pod's direct path to the forbidden address is refused on the
	// way (what a NetworkPolicy or firewall does); the gateway's is not.
	l.gw.Run(t, "ip", "rule", "add", "from", podIP, "to", forbiddenIP, "prohibit")
	l.gw.Run(t, "ip", "addr", "add", apiIP+"/32", "dev", "lo")
	l.gw.Run(t, "ip", "route", "add", "blackhole", "10.66.0.0/24")

	// The internet: an egret echo server.
	eln := l.listen(t, l.inet, inetIP+":0")
	esrv := echo.Server()
	go esrv.Serve(eln)
	t.Cleanup(func() { esrv.Close() })
	l.echoURL = "http://echo.example.test:" + port(eln) + "/"
	// Every inet address, IPv4 and IPv6: the dual-stack and forbidden
	// destinations.
	dln := l.listen(t, l.inet, "[::]:0")
	dsrv := echo.Server()
	go dsrv.Serve(dln)
	t.Cleanup(func() { dsrv.Close() })
	l.dualPort = port(dln)
	dead := l.listen(t, l.inet, inetIP+":0")
	l.deadEchoPort = port(dead)
	dead.Close()

	// The cluster: the API server stand-in answers any HTTP request.
	aln := l.listen(t, l.gw, apiIP+":0")
	asrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"kind":"Status"}`)) })}
	go asrv.Serve(aln)
	t.Cleanup(func() { asrv.Close() })
	l.apiPort = port(aln)

	// DNS for the pod.
	l.dnsAddr = startDNS(t, l.pod, map[string]string{
		"dual.example.test":                      inetIP + "," + inetIP6,
		"echo6.example.test":                     inetIP6,
		"forbidden.example.test":                 forbiddenIP,
		"leaky.example.test":                     leakyIP,
		"wiki.corp.test":                         apiIP,
		"egret-policy.egress.svc.cluster.local":  gwPodSideIP + "," + gwPodSideIP6,
		"kubernetes.default.svc.cluster.local":   apiIP,
		"egret-gateway.egress.svc.cluster.local": gwPodSideIP,
		"egret-deny.egress.svc.cluster.local":    gwPodSideIP,
		"squid.egress.svc.cluster.local":         gwPodSideIP,
		"dead-gateway.egress.svc.cluster.local":  holeIP,
		"blocked.shop.svc.cluster.local":         holeSvcIP,
		"echo.example.test":                      inetIP,
	})
	l.resolvConf = filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(l.resolvConf, []byte(resolvText), 0o644); err != nil {
		t.Fatal(err)
	}

	// Egret gateways: they know the outside names, not the cluster's.
	outside := map[string]string{"echo.example.test": inetIP, "dual.example.test": inetIP, "forbidden.example.test": forbiddenIP, "leaky.example.test": leakyIP}
	l.gateway = "egret-gateway.egress:" + port(l.startEgret(t, l.gw, gwPodSideIP+":0", nil, outside, nil))
	deny := []route.Rule{{Match: route.Match{Hosts: []string{"echo.example.test"}}, Action: route.Deny, Source: "test deny rule"}}
	l.denyGateway = "egret-deny.egress:" + port(l.startEgret(t, l.gw, gwPodSideIP+":0", deny, outside, nil))
	policy := []route.Rule{{Match: route.Match{Hosts: []string{"forbidden.example.test", "leaky.example.test"}}, Action: route.Deny, Source: "test forbidden rule"}}
	l.policyGateway = "egret-policy.egress:" + port(l.startEgret(t, l.gw, "[::]:0", policy, outside, nil))
	closed := l.listen(t, l.gw, gwPodSideIP+":0")
	l.deadPort = port(closed)
	closed.Close()

	// Squid with Basic auth on the gateway host.
	free := l.listen(t, l.gw, gwPodSideIP+":0")
	sp := port(free)
	free.Close()
	squid.Start(t, squid.Options{User: squidUser, Password: squidPass, Hosts: outside, Listen: gwPodSideIP + ":" + sp, Namespace: l.gw})
	l.squid = "squid.egress:" + sp

	// A sidecar in the pod whose upstream is Squid with a wrong password.
	sc := l.startEgret(t, l.pod, "127.0.0.1:0", nil, outside, []string{"http://" + squidUser + ":" + wrongPass + "@" + gwPodSideIP + ":" + sp})
	l.sidecar = "127.0.0.1:" + port(sc)
	return l
}

func (l *lab) listen(t *testing.T, ns *netns.NS, addr string) net.Listener {
	t.Helper()
	network := "tcp4"
	if strings.HasPrefix(addr, "[") {
		network = "tcp" // [::]: both families
	}
	ln, err := ns.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func port(ln net.Listener) string { return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) }

// nsDialer dials from inside a namespace (upstream.Pool's Dialer).
type nsDialer struct{ ns *netns.NS }

func (d nsDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.ns.Dial(ctx, network, addr)
}

// startEgret runs an egret proxy listening in ns and dialing from it:
// routes, static hosts, and an upstream pool when members are given.
func (l *lab) startEgret(t *testing.T, ns *netns.NS, listen string, rules []route.Rule, hosts map[string]string, members []string) net.Listener {
	t.Helper()
	def := route.Direct
	st := &proxy.State{Pools: map[string]*upstream.Pool{}, DefaultPool: "default"}
	if len(members) > 0 {
		def = route.Upstream
		p := &upstream.Pool{Name: "default", Dialer: nsDialer{ns}, ConnectTimeout: 5 * time.Second}
		for _, raw := range members {
			m, err := upstream.ParseMemberURL(raw)
			if err != nil {
				t.Fatal(err)
			}
			p.Members = append(p.Members, upstream.NewMember(m))
		}
		st.Pools["default"] = p
	}
	tbl, err := route.New(rules, def, "")
	if err != nil {
		t.Fatal(err)
	}
	st.Routes = tbl
	h := map[string][]netip.Addr{}
	for n, a := range hosts {
		h[n] = []netip.Addr{netip.MustParseAddr(a)}
	}
	res := resolve.New(resolve.Config{Hosts: h}, func(_ context.Context, _, host string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	})
	s, err := proxy.New(proxy.Options{Via: "egret-lab", Resolver: res, DialContext: ns.Dial,
		Timeouts: proxy.Timeouts{Dial: 3 * time.Second, UpstreamConnect: 3 * time.Second}}, st)
	if err != nil {
		t.Fatal(err)
	}
	ln := l.listen(t, ns, listen)
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return ln
}

// resolver asks the lab's DNS server, from the pod.
func (l *lab) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return l.pod.Dial(ctx, "udp4", l.dnsAddr)
	}}
}

// deps are the doctor's dependencies inside the pod: the pod's network,
// the lab's DNS, this environment for the shell and PID 1 (unless pid1 is
// given), and curl, python3 and node "installed".
func (l *lab) deps(t *testing.T, env []string, pid1 []string) Deps {
	t.Helper()
	if pid1 == nil {
		pid1 = env
	}
	dir := t.TempDir()
	environ := filepath.Join(dir, "environ")
	if err := os.WriteFile(environ, []byte(strings.Join(pid1, "\x00")+"\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	return Deps{
		Environ:     env,
		PID1Environ: environ,
		ResolvConf:  l.resolvConf,
		Resolver:    l.resolver(),
		Dial:        l.pod.Dial,
		LookPath: func(f string) (string, error) {
			switch f {
			case "curl", "python3", "node":
				return "/usr/bin/" + f, nil
			}
			return "", os.ErrNotExist
		},
	}
}

// startDNS serves A records for names (NXDOMAIN for the rest) on a UDP
// port of ns's loopback and returns its address.
func startDNS(t *testing.T, ns *netns.NS, names map[string]string) string {
	t.Helper()
	recs := map[string][]netip.Addr{}
	for n, as := range names {
		for _, a := range strings.Split(as, ",") {
			recs[strings.ToLower(n)+"."] = append(recs[strings.ToLower(n)+"."], netip.MustParseAddr(a))
		}
	}
	var pc net.PacketConn
	if err := ns.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp4", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			resp := dnsmessage.Message{
				Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true},
				Questions: []dnsmessage.Question{q},
			}
			as, ok := recs[strings.ToLower(q.Name.String())]
			if !ok {
				resp.RCode = dnsmessage.RCodeNameError
			}
			for _, a := range as {
				switch {
				case q.Type == dnsmessage.TypeA && a.Is4():
					resp.Answers = append(resp.Answers, dnsmessage.Resource{
						Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
						Body:   &dnsmessage.AResource{A: a.As4()},
					})
				case q.Type == dnsmessage.TypeAAAA && a.Is6():
					resp.Answers = append(resp.Answers, dnsmessage.Resource{
						Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeAAAA, Class: dnsmessage.ClassINET, TTL: 5},
						Body:   &dnsmessage.AAAAResource{AAAA: a.As16()},
					})
				}
			}
			if out, err := resp.Pack(); err == nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

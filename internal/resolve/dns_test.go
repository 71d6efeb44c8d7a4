package resolve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is a small authoritative DNS server on loopback (UDP and TCP)
// for the zone "test.": it answers from records, NXDOMAIN with an SOA, and
// truncates over UDP the names listed in truncate.
type dnsServer struct {
	addr     string
	mu       sync.Mutex
	records  map[string][]dnsmessage.Resource // name. → answers (any type)
	servfail map[string]bool
	truncate map[string]bool
	queries  atomic.Int32
	tcp      atomic.Int32
	down     atomic.Bool
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	// DNS over TCP uses the UDP port's number: pick UDP ports until the
	// same TCP port is free too (another process may hold it), and fail,
	// never skip, when none is.
	var pc net.PacketConn
	var ln net.Listener
	var err error
	for try := 0; ln == nil; try++ {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
			if try == 50 {
				t.Fatalf("no loopback port free for both UDP and TCP after %d tries: %v", try+1, err)
			}
		}
	}
	s := &dnsServer{addr: pc.LocalAddr().String(), records: map[string][]dnsmessage.Resource{}, servfail: map[string]bool{}, truncate: map[string]bool{}}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := s.answer(buf[:n], true); out != nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				s.tcp.Add(1)
				out := s.answer(q, false)
				binary.BigEndian.PutUint16(l[:], uint16(len(out)))
				c.Write(append(l[:], out...))
			}()
		}
	}()
	return s
}

func (s *dnsServer) set(name string, ttl uint32, addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := dnsmessage.MustNewName(name)
	var rrs []dnsmessage.Resource
	for _, a := range addrs {
		ip := netip.MustParseAddr(a)
		h := dnsmessage.ResourceHeader{Name: n, Class: dnsmessage.ClassINET, TTL: ttl}
		if ip.Is4() {
			h.Type = dnsmessage.TypeA
			rrs = append(rrs, dnsmessage.Resource{Header: h, Body: &dnsmessage.AResource{A: ip.As4()}})
		} else {
			h.Type = dnsmessage.TypeAAAA
			rrs = append(rrs, dnsmessage.Resource{Header: h, Body: &dnsmessage.AAAAResource{AAAA: ip.As16()}})
		}
	}
	s.records[name] = rrs
}

func (s *dnsServer) answer(q []byte, udp bool) []byte {
	if s.down.Load() {
		return nil
	}
	s.queries.Add(1)
	var m dnsmessage.Message
	if err := m.Unpack(q); err != nil || len(m.Questions) != 1 {
		return nil
	}
	qs := m.Questions[0]
	name := strings.ToLower(qs.Name.String())
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: m.Header.ID, Response: true, Authoritative: true}, Questions: m.Questions}
	rrs, ok := s.records[name]
	switch {
	case s.servfail[name]:
		resp.Header.RCode = dnsmessage.RCodeServerFailure
	case !ok:
		resp.Header.RCode = dnsmessage.RCodeNameError
		resp.Authorities = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("test."), Type: dnsmessage.TypeSOA, Class: dnsmessage.ClassINET, TTL: 60},
			Body: &dnsmessage.SOAResource{NS: dnsmessage.MustNewName("ns.test."), MBox: dnsmessage.MustNewName("h.test."),
				Serial: 1, Refresh: 60, Retry: 60, Expire: 60, MinTTL: 2},
		}}
	case udp && s.truncate[name]:
		resp.Header.Truncated = true
	default:
		for _, rr := range rrs {
			if rr.Header.Type == qs.Type {
				resp.Answers = append(resp.Answers, rr)
			}
		}
	}
	out, _ := resp.Pack()
	return out
}

func TestResolvConf(t *testing.T) {
	c := resolvConf("# x\nnameserver 10.96.0.10\nnameserver fd00::a\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5 timeout:2 attempts:3 edns0\n")
	if strings.Join(c.servers, ",") != "10.96.0.10:53,[fd00::a]:53" || c.rc.Ndots != 5 || c.timeout != 2*time.Second || c.attempts != 3 {
		t.Errorf("parsed %+v", c)
	}
	tests := []struct {
		host string
		want string
	}{
		{"payments", "payments.default.svc.cluster.local. payments.svc.cluster.local. payments.cluster.local. payments."},
		{"api.partner.example.com", "api.partner.example.com.default.svc.cluster.local. api.partner.example.com.svc.cluster.local. api.partner.example.com.cluster.local. api.partner.example.com."},
		{"a.b.c.d.e.f", "a.b.c.d.e.f. a.b.c.d.e.f.default.svc.cluster.local. a.b.c.d.e.f.svc.cluster.local. a.b.c.d.e.f.cluster.local."},
		{"abs.example.", "abs.example."},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			if got := strings.Join(c.names(tt.host), " "); got != tt.want {
				t.Errorf("names = %s", got)
			}
		})
	}
}

func FuzzResolvConf(f *testing.F) {
	f.Add("nameserver 1.2.3.4\nsearch a b\noptions ndots:2\n")
	f.Add("options ndots:-1 timeout:x attempts:99999999999")
	f.Fuzz(func(t *testing.T, s string) {
		c := resolvConf(s)
		if c.rc.Ndots < 0 || c.rc.Ndots > 15 || len(c.rc.Search) > 32 || c.timeout <= 0 || c.attempts < 1 || len(c.servers) > 3 {
			t.Fatalf("out of range: %+v", c)
		}
		c.names("x")
	})
}

// TestCacheRealTTLs runs the cache against the DNS server: answers are kept
// for their own TTL (bounded), failures for the SOA's negative TTL, a
// truncated answer is fetched over TCP, search domains apply, and an
// answer past its TTL is served stale while the server is down.
func TestCacheRealTTLs(t *testing.T) {
	s := startDNS(t)
	s.set("short.test.", 3, "127.0.0.10")
	s.set("long.test.", 100000, "127.0.0.11", "::1")
	s.set("big.test.", 300, "127.0.0.12")
	s.mu.Lock()
	s.truncate["big.test."] = true
	s.mu.Unlock()
	s.set("svc.corp.test.", 60, "127.0.0.13")
	dir := t.TempDir()
	conf := dir + "/resolv.conf"
	writeFile(t, conf, "nameserver 127.0.0.1\nsearch corp.test\noptions ndots:1 timeout:1 attempts:1\n")
	c := New(Config{Servers: []string{s.addr}, ResolvConf: conf, SystemHosts: "-", MaxTTL: time.Hour, StaleTTL: time.Minute}, nil)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	ctx := context.Background()
	lookup := func(host string) ([]netip.Addr, error) { return c.LookupNetIP(ctx, "ip", host) }

	a, err := lookup("long.test")
	if err != nil || len(a) != 2 || a[0] != netip.MustParseAddr("127.0.0.11") || a[1] != netip.MustParseAddr("::1") {
		t.Fatalf("long.test: %v %v", a, err)
	}
	q := s.queries.Load()
	now = now.Add(59 * time.Minute)
	if _, err := lookup("long.test"); err != nil || s.queries.Load() != q {
		t.Errorf("within max_ttl the answer was asked again (%v)", err)
	}
	now = now.Add(2 * time.Minute) // past max_ttl (1h) though the TTL is longer
	lookup("long.test")
	if s.queries.Load() == q {
		t.Error("the answer outlived max_ttl")
	}

	lookup("short.test")
	q = s.queries.Load()
	now = now.Add(2 * time.Second)
	lookup("short.test")
	if s.queries.Load() != q {
		t.Error("asked again within the 3s TTL")
	}
	now = now.Add(2 * time.Second)
	lookup("short.test")
	if s.queries.Load() == q {
		t.Error("not asked again after the 3s TTL")
	}

	if a, err := lookup("big.test"); err != nil || len(a) != 1 || s.tcp.Load() == 0 {
		t.Errorf("truncated answer: %v %v (tcp queries %d)", a, err, s.tcp.Load())
	}
	if a, err := lookup("svc"); err != nil || len(a) != 1 || a[0] != netip.MustParseAddr("127.0.0.13") {
		t.Errorf("search domain: %v %v", a, err)
	}

	// Negative caching for the SOA's negative TTL (min(60, 2) = 2s).
	_, err = lookup("missing.test")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound {
		t.Fatalf("missing name: %v", err)
	}
	q = s.queries.Load()
	now = now.Add(time.Second)
	lookup("missing.test")
	if s.queries.Load() != q {
		t.Error("a negative answer was not cached")
	}
	now = now.Add(1500 * time.Millisecond)
	lookup("missing.test")
	if s.queries.Load() == q {
		t.Error("a negative answer outlived the SOA negative TTL")
	}

	// Stale on error: the server goes away; short.test is past its TTL
	// but within the stale window.
	s.down.Store(true)
	now = now.Add(10 * time.Second)
	if a, err := lookup("short.test"); err != nil || len(a) != 1 {
		t.Errorf("stale answer while the server is down: %v %v", a, err)
	}
	now = now.Add(2 * time.Minute) // past the stale window
	if _, err := lookup("short.test"); err == nil {
		t.Error("a stale answer outlived stale_ttl")
	}

	// A server failure is not a "no such host".
	s.down.Store(false)
	s.mu.Lock()
	s.servfail["broken.test."] = true
	s.servfail["broken.corp.test."] = true
	s.mu.Unlock()
	_, err = lookup("broken.test")
	if !errors.As(err, &de) || de.IsNotFound || !de.IsTemporary {
		t.Errorf("SERVFAIL: %#v", err)
	}
}

func TestSystemHostsFirst(t *testing.T) {
	s := startDNS(t)
	dir := t.TempDir()
	writeFile(t, dir+"/hosts", "127.0.0.1 localhost\n127.0.0.5 pinned.test\n")
	writeFile(t, dir+"/resolv.conf", "nameserver 127.0.0.1\n")
	c := New(Config{Servers: []string{s.addr}, ResolvConf: dir + "/resolv.conf", SystemHosts: dir + "/hosts"}, nil)
	if a, err := c.LookupNetIP(context.Background(), "ip", "pinned.test"); err != nil || a[0] != netip.MustParseAddr("127.0.0.5") || s.queries.Load() != 0 {
		t.Errorf("hosts file: %v %v (queries %d)", a, err, s.queries.Load())
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := osWriteFile(path, []byte(s)); err != nil {
		t.Fatal(err)
	}
}

var osWriteFile = func(p string, b []byte) error { return os.WriteFile(p, b, 0o644) }

func TestSortV4FirstKeepsOrder(t *testing.T) {
	a := []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"),
		netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.1")}
	SortV4First(a)
	want := "[192.0.2.2 192.0.2.1 2001:db8::1 2001:db8::2]"
	if got := fmt.Sprint(a); got != want {
		t.Errorf("SortV4First = %s, want %s", got, want)
	}
}

func TestParseResolvConf(t *testing.T) {
	for _, tt := range []struct {
		name, text  string
		search      []string
		ndots       int
		nameservers string
	}{
		{"kubernetes-pod", "search shop.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
			[]string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local"}, 5, "[10.96.0.10]"},
		{"case-and-dots", "nameserver 10.0.0.10\nsearch Payments.svc.corp.example. .svc.corp.example\noptions timeout:2 ndots:3 attempts:2\n",
			[]string{"payments.svc.corp.example", "svc.corp.example"}, 3, "[10.0.0.10]"},
		{"comments-and-last-search-wins", "# generated\nsearch a.example\n; old\nsearch b.example # inline\nnameserver 1.1.1.1\nnameserver fd00::10\n",
			[]string{"b.example"}, 1, "[1.1.1.1 fd00::10]"},
		{"domain-line", "domain corp.example\n", []string{"corp.example"}, 1, "[]"},
		{"three-servers-at-most-and-names-skipped", "nameserver dns.example\nnameserver 1.1.1.1\nnameserver 2.2.2.2\nnameserver 3.3.3.3\nnameserver 4.4.4.4\n", nil, 1, "[1.1.1.1 2.2.2.2 3.3.3.3]"},
		{"ndots-capped-and-bad-ignored", "options ndots:99\noptions ndots:x\n", nil, 15, "[]"},
		{"empty", "", nil, 1, "[]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := ParseResolvConf(tt.text)
			if fmt.Sprint(rc.Search) != fmt.Sprint(tt.search) || rc.Ndots != tt.ndots || fmt.Sprint(rc.Nameservers) != tt.nameservers {
				t.Errorf("got search %q ndots %d nameservers %v", rc.Search, rc.Ndots, rc.Nameservers)
			}
		})
	}
}

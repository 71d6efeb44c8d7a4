// Package dnstest runs a real DNS server for tests (github.com/miekg/dns,
// UDP and TCP on one loopback port) whose answers the test decides per
// question — a name with several addresses, an answer that changes from
// one question to the next (DNS rebinding) — so egret's resolver is tested
// over the wire, never against real DNS.
package dnstest

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Answer returns the addresses for the nth lookup (from 1) of name (lower
// case, no trailing dot); nil is NXDOMAIN. A lookup is counted by its A
// question; its AAAA question gets the answer of the latest count. The
// server answers A questions with the IPv4 addresses and AAAA questions
// with the IPv6 ones.
type Answer func(name string, n int) []netip.Addr

// Server is a running DNS server.
type Server struct {
	// Addr is its "127.0.0.1:port", UDP and TCP.
	Addr string

	answer Answer
	ttl    uint32
	mu     sync.Mutex
	asked  map[string]int // name → A questions about it
}

// Start serves answer on a free loopback port until the test ends. Every
// answer has TTL ttl (0: a resolver must ask again each time).
func Start(t testing.TB, ttl uint32, answer Answer) *Server {
	t.Helper()
	s := &Server{answer: answer, ttl: ttl, asked: map[string]int{}}
	// DNS over TCP uses the UDP port's number: pick UDP ports until the
	// same TCP port is free too.
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
				t.Fatalf("no loopback port free for both UDP and TCP: %v", err)
			}
		}
	}
	s.Addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(s.serve)
	udp := &dns.Server{PacketConn: pc, Handler: h}
	tcp := &dns.Server{Listener: ln, Handler: h}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() {
		udp.Shutdown()
		tcp.Shutdown()
	})
	return s
}

// Asked returns how many lookups of name the server answered (A
// questions).
func (s *Server) Asked(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[name]
}

func (s *Server) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	s.mu.Lock()
	n := s.asked[name]
	if q.Qtype == dns.TypeA {
		n++
		s.asked[name] = n
	}
	s.mu.Unlock()
	n = max(n, 1)
	addrs := s.answer(name, n)
	if addrs == nil {
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: s.ttl},
			Ns: "ns.test.", Mbox: "root.test.", Serial: 1, Refresh: 60, Retry: 60, Expire: 60, Minttl: s.ttl}}
		w.WriteMsg(m)
		return
	}
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: s.ttl}
	}
	for _, a := range addrs {
		switch {
		case q.Qtype == dns.TypeA && a.Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: a.AsSlice()})
		case q.Qtype == dns.TypeAAAA && a.Is6() && !a.Is4In6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: a.AsSlice()})
		}
	}
	w.WriteMsg(m)
}

// Fixed answers the same addresses every time for the names of m (name →
// addresses as text); other names do not exist.
func Fixed(m map[string][]string) Answer {
	parsed := map[string][]netip.Addr{}
	for name, as := range m {
		for _, a := range as {
			parsed[name] = append(parsed[name], netip.MustParseAddr(a))
		}
	}
	return func(name string, _ int) []netip.Addr { return parsed[name] }
}

package resolve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsClient asks DNS servers directly (UDP, TCP when the answer is
// truncated) so answers come with their TTLs, and failures with the
// negative-caching TTL of the zone's SOA (RFC 2308).
type dnsClient struct {
	servers  []string // ip:port, tried in order
	rc       ResolvConf
	timeout  time.Duration // per server try
	attempts int
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
}

// resolvConf makes the client of a resolv.conf's text.
func resolvConf(text string) *dnsClient {
	rc := ParseResolvConf(text)
	c := &dnsClient{rc: rc, timeout: rc.Timeout, attempts: rc.Attempts}
	for _, a := range rc.Nameservers {
		c.servers = append(c.servers, netip.AddrPortFrom(a, 53).String())
	}
	return c
}

// names returns the names to try for host (ResolvConf.Names).
func (c *dnsClient) names(host string) []string { return c.rc.Names(host) }

// errNoAnswer is a name that exists without A/AAAA records.
var errNoAnswer = errors.New("no answer")

// lookup resolves host to its addresses and the time they may be cached.
// A name that does not exist is a *net.DNSError with IsNotFound and, as
// ttl, how long the zone says to remember that.
func (c *dnsClient) lookup(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
	var negTTL time.Duration
	var lastErr error
	for _, name := range c.names(host) {
		addrs, ttl, err := c.lookupName(ctx, name)
		if err == nil {
			return addrs, ttl, nil
		}
		var nf *notFoundError
		if errors.As(err, &nf) {
			if negTTL == 0 || (nf.ttl > 0 && nf.ttl < negTTL) {
				negTTL = nf.ttl
			}
			continue
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	if lastErr != nil {
		return nil, 0, lastErr
	}
	return nil, negTTL, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type notFoundError struct{ ttl time.Duration }

func (e *notFoundError) Error() string { return "no such host" }

// lookupName asks for A and AAAA records of one absolute name at once.
func (c *dnsClient) lookupName(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	type res struct {
		addrs []netip.Addr
		ttl   time.Duration
		err   error
	}
	ch := make(chan res, 2)
	for _, t := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
		go func() {
			a, ttl, err := c.query(ctx, name, t)
			ch <- res{a, ttl, err}
		}()
	}
	var out []netip.Addr
	var ttl time.Duration
	var nf *notFoundError
	var hardErr error
	for i := 0; i < 2; i++ {
		r := <-ch
		switch {
		case r.err == nil:
			out = append(out, r.addrs...)
			if ttl == 0 || r.ttl < ttl {
				ttl = r.ttl
			}
		case errors.As(r.err, &nf):
		default:
			hardErr = r.err
		}
	}
	if len(out) > 0 {
		// IPv4 first, as most clients prefer it with a v4-only route.
		SortV4First(out)
		return out, ttl, nil
	}
	if hardErr != nil {
		return nil, 0, hardErr
	}
	if nf == nil {
		nf = &notFoundError{}
	}
	return nil, 0, nf
}

// SortV4First orders a in place with the IPv4 addresses first, keeping the
// server's order within each family (round-robin, RFC 6724 preferences).
func SortV4First(a []netip.Addr) {
	slices.SortStableFunc(a, func(x, y netip.Addr) int {
		switch {
		case x.Is4() == y.Is4():
			return 0
		case x.Is4():
			return -1
		}
		return 1
	})
}

// query asks the servers in turn for one record type of name.
func (c *dnsClient) query(ctx context.Context, name string, t dnsmessage.Type) ([]netip.Addr, time.Duration, error) {
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, 0, &net.DNSError{Err: "invalid name", Name: name}
	}
	q := dnsmessage.Question{Name: qname, Type: t, Class: dnsmessage.ClassINET}
	var lastErr error
	for attempt := 0; attempt < c.attempts; attempt++ {
		for _, srv := range c.servers {
			if ctx.Err() != nil {
				return nil, 0, dnsErr(name, ctx.Err())
			}
			msg, err := c.exchange(ctx, srv, q)
			if err != nil {
				lastErr = err
				continue
			}
			switch msg.Header.RCode {
			case dnsmessage.RCodeSuccess:
			case dnsmessage.RCodeNameError:
				return nil, 0, &notFoundError{ttl: soaTTL(msg)}
			default:
				lastErr = &net.DNSError{Err: "server " + srv + " answered " + msg.Header.RCode.String(), Name: name, Server: srv, IsTemporary: true}
				continue
			}
			addrs, ttl := answers(msg, t)
			if len(addrs) == 0 {
				return nil, 0, &notFoundError{ttl: soaTTL(msg)}
			}
			return addrs, ttl, nil
		}
	}
	if lastErr == nil {
		lastErr = errors.New("no DNS server")
	}
	return nil, 0, dnsErr(name, lastErr)
}

func dnsErr(name string, err error) error {
	var de *net.DNSError
	if errors.As(err, &de) {
		return de
	}
	var ne net.Error
	timeout := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	return &net.DNSError{Err: err.Error(), Name: strings.TrimSuffix(name, "."), IsTimeout: timeout, IsTemporary: true}
}

func answers(m *dnsmessage.Message, t dnsmessage.Type) ([]netip.Addr, time.Duration) {
	var out []netip.Addr
	var ttl uint32
	first := true
	for _, rr := range m.Answers {
		if rr.Header.Class != dnsmessage.ClassINET {
			continue
		}
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			if t == dnsmessage.TypeA {
				out = append(out, netip.AddrFrom4(b.A))
			}
		case *dnsmessage.AAAAResource:
			if t == dnsmessage.TypeAAAA {
				out = append(out, netip.AddrFrom16(b.AAAA).Unmap())
			}
		case *dnsmessage.CNAMEResource:
		default:
			continue
		}
		// The shortest TTL of the chain (CNAMEs included) bounds the answer.
		if first || rr.Header.TTL < ttl {
			ttl, first = rr.Header.TTL, false
		}
	}
	return out, time.Duration(ttl) * time.Second
}

// soaTTL is the negative-caching time of a response: min(SOA TTL, SOA
// MINIMUM) of the authority section (RFC 2308 section 5), or 0.
func soaTTL(m *dnsmessage.Message) time.Duration {
	for _, rr := range m.Authorities {
		if soa, ok := rr.Body.(*dnsmessage.SOAResource); ok {
			return time.Duration(min(rr.Header.TTL, soa.MinTTL)) * time.Second
		}
	}
	return 0
}

// exchange sends q to srv over UDP and, when the answer is truncated, over
// TCP, and returns the matching response.
func (c *dnsClient) exchange(ctx context.Context, srv string, q dnsmessage.Question) (*dnsmessage.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	id := uint16(rand.Uint32())
	b := dnsmessage.NewBuilder(make([]byte, 2, 514), dnsmessage.Header{ID: id, RecursionDesired: true})
	b.EnableCompression()
	b.StartQuestions()
	b.Question(q)
	b.StartAdditionals()
	var opt dnsmessage.ResourceHeader
	opt.SetEDNS0(1232, dnsmessage.RCodeSuccess, false)
	b.OPTResource(opt, dnsmessage.OPTResource{})
	raw, err := b.Finish()
	if err != nil {
		return nil, err
	}
	m, err := c.roundTrip(ctx, "udp", srv, raw[2:], id, q)
	if err == nil && !m.Header.Truncated {
		return m, nil
	}
	if err != nil && !errors.Is(err, errTruncated) {
		return nil, err
	}
	binary.BigEndian.PutUint16(raw, uint16(len(raw)-2))
	return c.roundTrip(ctx, "tcp", srv, raw, id, q)
}

var errTruncated = errors.New("truncated")

func (c *dnsClient) roundTrip(ctx context.Context, network, srv string, raw []byte, id uint16, q dnsmessage.Question) (*dnsmessage.Message, error) {
	dial := c.dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	conn, err := dial(ctx, network, srv)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(raw); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	for {
		var n int
		if network == "tcp" {
			if _, err := io.ReadFull(conn, buf[:2]); err != nil {
				return nil, err
			}
			l := int(binary.BigEndian.Uint16(buf[:2]))
			if _, err := io.ReadFull(conn, buf[:l]); err != nil {
				return nil, err
			}
			n = l
		} else if n, err = conn.Read(buf); err != nil {
			return nil, err
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[:n]); err != nil {
			if network == "tcp" {
				return nil, fmt.Errorf("bad DNS answer from %s: %w", srv, err)
			}
			continue // not a DNS answer: keep waiting for ours
		}
		if m.Header.ID != id || !m.Header.Response || len(m.Questions) != 1 || !sameQuestion(m.Questions[0], q) {
			if network == "tcp" {
				return nil, fmt.Errorf("mismatched DNS answer from %s", srv)
			}
			continue // a stray or spoofed datagram
		}
		if m.Header.Truncated && network == "udp" {
			return &m, errTruncated
		}
		return &m, nil
	}
}

func sameQuestion(a, b dnsmessage.Question) bool {
	return a.Type == b.Type && a.Class == b.Class && strings.EqualFold(a.Name.String(), b.Name.String())
}

// systemClient reads /etc/resolv.conf; nil when it names no server.
func systemClient(path string) *dnsClient {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	c := resolvConf(string(b))
	if len(c.servers) == 0 {
		return nil
	}
	return c
}

package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/proxy"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/proxyauth"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/upstream"
)

// Talking to an upstream member: the dial (TCP, TLS to an https member),
// a SOCKS5 member's handshake, and the conversation an http(s) member has
// with egret before it serves — a CONNECT, or the NTLM negotiate round of
// requests in absolute form — with the rounds of a Basic, NTLM or
// Negotiate handshake on the same connection. Every message egret writes
// to a member is written here or by http1's request writer through
// RoundTrip.

// Tunnel is an established tunnel through a member.
type Tunnel struct {
	net.Conn
	Member *upstream.Member
	// Prefix holds bytes the member sent after its CONNECT answer that are
	// already read from Conn; they belong to the tunnel and must be relayed
	// first.
	Prefix []byte
}

// maxChallengeBody bounds the body of a 407 that carries a handshake's
// challenge: egret reads it to send the next round on the same
// connection.
const maxChallengeBody = 64 << 10

// DialTunnel opens a tunnel to target ("host:port") through the pool:
// Pool.Do's failover around OpenTunnel.
func (t *Transport) DialTunnel(ctx context.Context, p *upstream.Pool, target string) (*Tunnel, error) {
	var tun *Tunnel
	_, err := p.Do(ctx, upstream.TargetHost(target), nil, func(ctx context.Context, m *upstream.Member, cred *credentials.Credential, _ bool) (int, error) {
		tt, code, err := t.OpenTunnel(ctx, p, m, target, cred)
		tun = tt
		return code, err
	})
	if err != nil {
		return nil, err
	}
	return tun, nil
}

// Opener is OpenTunnel for the probes of p (upstream.Pool.RunProbes).
func (t *Transport) Opener(p *upstream.Pool) upstream.Opener {
	return func(ctx context.Context, m *upstream.Member, target string, cred *credentials.Credential) (io.Closer, int, error) {
		tun, code, err := t.OpenTunnel(ctx, p, m, target, cred)
		if tun == nil {
			return nil, code, err // no typed nil in the interface
		}
		return tun, code, err
	}
}

// OpenTunnel makes one attempt at a tunnel to target through m, a member
// of p, with cred (nil: none): no failover, no fallback, no health verdict
// (Pool.Do's work). It returns the member's status code (0 when it did not
// answer). A member that took the CONNECT and said nothing in time is an
// *upstream.Silence; a refusal an *upstream.Refusal.
func (t *Transport) OpenTunnel(ctx context.Context, p *upstream.Pool, m *upstream.Member, target string, cred *credentials.Credential) (*Tunnel, int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout())
	defer cancel()
	if m.URL.Scheme == upstream.SchemeSOCKS5 {
		tun, err := t.dialSOCKS(ctx, p, m, target, cred)
		return tun, 0, err
	}
	// A per-connection scheme's first value comes before the dial: a
	// Kerberos ticket the KDC will not give makes the member unusable.
	var h *proxyauth.Handshake
	auth := ""
	if m.Auth.PerConnection() {
		h = m.Handshake(cred)
		var err error
		if auth, err = h.First(); err != nil {
			return nil, 0, upstream.AuthError(m.Name, err)
		}
	} else if cred != nil {
		auth = cred.AuthHeader()
	}
	c, err := t.DialMember(ctx, p, m)
	if err != nil {
		return nil, 0, err
	}
	prefix, err := connect(ctx, c, target, auth, h, m.Name)
	if err != nil {
		c.Close()
		code := 0
		var r *upstream.Refusal
		var pe *proxystatus.Error
		switch {
		case errors.As(err, &r):
			code = r.Code
		case errors.As(err, &pe) && pe.Type == proxystatus.ConnectionReadTimeout:
			err = &upstream.Silence{Err: pe} // it took the CONNECT and said nothing
		}
		return nil, code, err
	}
	return &Tunnel{Conn: c, Member: m, Prefix: prefix}, http.StatusOK, nil
}

// DialMember connects to an http or https member of p: TCP (p.Dialer),
// then TLS for https (p.TLSConfig). Failures name the member.
func (t *Transport) DialMember(ctx context.Context, p *upstream.Pool, m *upstream.Member) (net.Conn, error) {
	c, err := t.dialMemberTCP(ctx, p, m.URL.Host)
	if err != nil {
		return nil, upstream.MemberError(m.Name, "connect to upstream", err)
	}
	if m.URL.Scheme != upstream.SchemeHTTPS {
		return c, nil
	}
	cfg := &tls.Config{}
	if p.TLSConfig != nil {
		cfg = p.TLSConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = m.URL.Hostname()
	}
	tc, err := handshakeTLS(ctx, c, cfg)
	if err != nil {
		pe := err.(*proxystatus.Error)
		pe.Upstream, pe.Detail = m.Name, "TLS to upstream: "+pe.Err.Error()
		return nil, pe
	}
	return tc, nil
}

// memberDialer dials members of pools without a Dialer of their own.
var memberDialer = &net.Dialer{Timeout: upstream.DefaultDialTimeout}

// dialMemberTCP dials a member at addr ("host:port"). A member's host
// name is looked up with t.Resolver (egret's: EGRET_HOSTS_FILE,
// EGRET_DNS_SERVERS), as every other name egret dials, not by the
// system's resolver; its addresses are tried in order.
func (t *Transport) dialMemberTCP(ctx context.Context, p *upstream.Pool, addr string) (net.Conn, error) {
	if p.Dialer != nil {
		return p.Dialer.DialContext(ctx, "tcp", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || t.Resolver == nil {
		return memberDialer.DialContext(ctx, "tcp", addr)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return memberDialer.DialContext(ctx, "tcp", addr)
	}
	addrs, err := t.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	last := fmt.Errorf("lookup %s: no address", host)
	for _, a := range addrs {
		c, err := memberDialer.DialContext(ctx, "tcp", net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

func (t *Transport) dialSOCKS(ctx context.Context, p *upstream.Pool, m *upstream.Member, target string, cred *credentials.Credential) (*Tunnel, error) {
	var auth *proxy.Auth
	if cred != nil && !cred.IsBearer() { // SOCKS5 has no place for a bearer token
		auth = &proxy.Auth{User: cred.User, Password: cred.Password}
	}
	d, err := proxy.SOCKS5("tcp", m.URL.Host, auth, poolDialer{t, p})
	if err != nil {
		return nil, upstream.MemberError(m.Name, "socks5 upstream", err)
	}
	c, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, upstream.MemberError(m.Name, "socks5 connect", err)
	}
	return &Tunnel{Conn: c, Member: m}, nil
}

// poolDialer dials a pool's members for x/net/proxy's SOCKS5 client.
type poolDialer struct {
	t *Transport
	p *upstream.Pool
}

func (d poolDialer) Dial(network, addr string) (net.Conn, error) {
	return d.t.dialMemberTCP(context.Background(), d.p, addr)
}

func (d poolDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.t.dialMemberTCP(ctx, d.p, addr)
}

// conversation is egret's exchange with an http(s) member before the
// member serves: rounds of a message (a CONNECT, or a HEAD carrying
// NTLM's negotiate message) and the member's answer, on one connection,
// with the Proxy-Authorization of a handshake's next round. ctx bounds it
// all (the connection's deadline; its end interrupts the reads).
type conversation struct {
	oc   *http1.Conn
	name string               // the member, for errors
	h    *proxyauth.Handshake // nil: no handshake
	req  *http.Request        // what an answer is read for (its method)
	// write writes one round's message with auth ("" none).
	write func(w *bufio.Writer, auth string)
	stop  func() bool
}

// start bounds the conversation by ctx.
func (cv *conversation) start(ctx context.Context) {
	c := cv.oc.Conn
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	cv.stop = context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
}

// end lifts the conversation's deadline.
func (cv *conversation) end() {
	cv.stop()
	cv.oc.Conn.SetDeadline(time.Time{})
}

// round sends one message with auth and reads the member's answer header
// (bounded like any response header). A failure to send is returned as
// a *http1.WriteError.
func (cv *conversation) round(auth string) (*http.Response, error) {
	cv.write(cv.oc.W, auth)
	if err := cv.oc.W.Flush(); err != nil {
		return nil, &http1.WriteError{Err: err}
	}
	resp, hit, err := cv.oc.ReadResponse(cv.req, http1.DefaultMaxResponseHeaderBytes)
	if hit {
		return nil, &proxystatus.Error{Type: proxystatus.HTTPResponseHeaderSize, Upstream: cv.name,
			Detail: "upstream " + cv.name + ": answer header larger than " + strconv.Itoa(http1.DefaultMaxResponseHeaderBytes) + " bytes"}
	}
	return resp, err
}

// challenge answers the member's 407 resp with the handshake: the next
// round's Proxy-Authorization, the 407's body read so the next round can
// go on the same connection. A challenge the handshake cannot answer is an
// *upstream.Refusal (AuthRefusal).
func (cv *conversation) challenge(resp *http.Response) (string, error) {
	next, err := cv.h.Next(resp.Header.Values("Proxy-Authenticate"))
	if err != nil {
		resp.Body.Close()
		return "", upstream.AuthRefusal(cv.name, err)
	}
	if resp.Close {
		resp.Body.Close()
		return "", &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: cv.name,
			Detail: "upstream " + cv.name + " closes the connection after its " + cv.h.Scheme.String() + " challenge; the handshake needs it kept alive"}
	}
	if n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxChallengeBody+1)); err != nil || n > maxChallengeBody {
		return "", &proxystatus.Error{Type: proxystatus.HTTPProtocolError, Upstream: cv.name,
			Detail: "upstream " + cv.name + ": the body of its 407 challenge is unreadable or larger than 64 KiB"}
	}
	return next, nil
}

var connectReq = &http.Request{Method: http.MethodConnect}

// connect performs an HTTP CONNECT for target on c, which is connected to
// the member named name, running the handshake h (nil: none) from its
// first Proxy-Authorization value auth (or ""). It returns bytes that
// arrived after the member's 200; failures are *proxystatus.Error values
// naming the member, a refusal is an *upstream.Refusal. A 407 that h can
// answer is answered with the next CONNECT on the same connection, so the
// authentication stays with the tunnel.
func connect(ctx context.Context, c net.Conn, target, auth string, h *proxyauth.Handshake, name string) ([]byte, error) {
	oc := http1.NewConn(c, c, 0)
	defer oc.Detach()
	cv := &conversation{oc: oc, name: name, h: h, req: connectReq, write: func(w *bufio.Writer, auth string) {
		w.WriteString("CONNECT ")
		w.WriteString(target)
		w.WriteString(" HTTP/1.1\r\nHost: ")
		w.WriteString(target)
		w.WriteString("\r\n")
		if auth != "" {
			w.WriteString("Proxy-Authorization: ")
			w.WriteString(auth)
			w.WriteString("\r\n")
		}
		w.WriteString("\r\n")
	}}
	cv.start(ctx)
	defer cv.end()
	for {
		resp, err := cv.round(auth)
		if err != nil {
			var we *http1.WriteError
			if errors.As(err, &we) {
				return nil, &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: name, Detail: "send CONNECT to upstream: " + errText(we.Err), Err: we.Err}
			}
			var pe *proxystatus.Error
			if errors.As(err, &pe) && pe.Upstream != "" {
				return nil, err
			}
			t := proxystatus.HTTPProtocolError
			if pe := proxystatus.From(err); pe.Type != proxystatus.ProxyInternalError {
				t = pe.Type
			}
			if t == proxystatus.ConnectionTimeout {
				t = proxystatus.ConnectionReadTimeout
			}
			detail := "read upstream's CONNECT answer: " + errText(err)
			if h != nil && errors.Is(err, io.EOF) && auth != "" && strings.HasPrefix(auth, "NTLM ") {
				t, detail = proxystatus.ConnectionTerminated, "upstream closed the connection during the NTLM handshake"
			}
			return nil, &proxystatus.Error{Type: t, Upstream: name, Detail: detail, Err: err}
		}
		if resp.StatusCode/100 == 2 {
			return http1.Buffered(oc.R), nil
		}
		if h == nil || resp.StatusCode != http.StatusProxyAuthRequired {
			resp.Body.Close()
			return nil, upstream.RefusalError(name, resp)
		}
		if auth, err = cv.challenge(resp); err != nil {
			return nil, err
		}
	}
}

// errText strips Go's "dial tcp 1.2.3.4:5:" noise down to the cause.
func errText(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	if de, ok := err.(*net.DNSError); ok {
		return de.Err
	}
	return err.Error()
}

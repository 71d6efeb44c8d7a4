package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"egret.io/egret/internal/ipaddr"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/origdst"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/sniff"
)

// TransparentOptions configure ServeTransparent. The zero value is what
// egret proxy uses.
type TransparentOptions struct {
	// OriginalDst recovers where a redirected connection was going; nil
	// means origdst.Lookup (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST). An
	// origdst.ErrNotTracked answer is taken as "not redirected": the
	// connection's own local address, which the loop guard refuses.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Sniff bounds the peek at the client's first bytes; zero fields take
	// the sniff package's defaults (16 KiB, 300 ms to the first byte, 3 s).
	Sniff sniff.Options
}

// ServeTransparent accepts iptables-REDIRECTed connections on ln until
// Shutdown. Each connection's original destination is recovered, its first
// bytes are peeked (TLS SNI or HTTP Host) so routing matches names, and it
// is then routed, dialled and relayed like a CONNECT tunnel: an upstream
// receives a CONNECT to the sniffed name (or to the original address when
// there is none); a direct dial always goes to the original address. A
// connection aimed at the proxy itself is refused (loop guard). It returns
// http.ErrServerClosed after Shutdown.
func (s *Server) ServeTransparent(ln net.Listener, o TransparentOptions) error {
	if o.OriginalDst == nil {
		o.OriginalDst = lookupOriginalDst
	}
	if a, ok := addrPort(ln.Addr()); ok {
		s.raw.noteTransparentPort(a.Port())
	}
	return s.serveRaw(ln, metrics.KindTransparent, func(ctx context.Context, c net.Conn, ev *event, l *lease) { s.serveTransparent(ctx, c, ev, l, &o) })
}

func lookupOriginalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T has no socket", c)
	}
	return origdst.Lookup(sc)
}

func (s *Server) serveTransparent(ctx context.Context, c net.Conn, ev *event, l *lease, o *TransparentOptions) {
	orig, err := o.OriginalDst(c)
	if errors.Is(err, origdst.ErrNotTracked) || errors.Is(err, syscall.ENOPROTOOPT) {
		// No NAT touched it (no conntrack entry, or no conntrack at all):
		// the client connected to this listener itself.
		orig, _ = addrPort(c.LocalAddr())
		err = nil
	}
	if err != nil {
		c.Close()
		e := &proxystatus.Error{Type: proxystatus.ProxyInternalError, Detail: errText(err), Err: err}
		s.failRaw(ctx, ev, e, e.Code())
		return
	}
	orig = netip.AddrPortFrom(orig.Addr().Unmap(), orig.Port())
	ev.origDst, ev.dest, ev.sniffed = orig.String(), orig.String(), sniff.Unknown.String()
	// The client and the loop are checked before sniffing: a refused
	// client gets no time, and a connection to egret itself may be one of
	// its own, waiting for the other side to speak first.
	if e := s.admitClient(ev, l); e != nil {
		c.Close()
		s.failRaw(ctx, ev, e, e.Code())
		return
	}
	if e := s.selfLoop(ev, orig); e != nil {
		c.Close()
		s.failRaw(ctx, ev, e, e.Code())
		return
	}

	// The workload is known before sniffing: under its policy's SNI check
	// the ClientHello is awaited as long as a CONNECT tunnel's, and a
	// sniff that cannot finish is a failed check, never "no name".
	sopts, check, enforce := o.Sniff, false, false
	if s.opts.Workloads != nil {
		if e := s.identify(ctx, ev, ""); e != nil {
			c.Close()
			s.failRaw(ctx, ev, e, e.Code())
			return
		}
		if r := ev.wl.Rules; r != nil {
			check, enforce = r.SNI(orig.Port())
		}
		if check {
			sopts.FirstByteTimeout = max(sopts.FirstByteTimeout, sniTimeout)
			sopts.Timeout = max(sopts.Timeout, sniTimeout)
		}
	}
	res, err := sniff.Sniff(c, sopts)
	ev.sniffed = res.Proto.String()
	if err != nil && !(errors.Is(err, io.EOF) && len(res.Peeked) > 0) {
		// The client reset, or closed before sending anything: nothing to
		// route, nobody to answer.
		c.Close()
		e := proxystatus.From(err)
		s.failRaw(ctx, ev, &proxystatus.Error{Type: e.Type, Detail: "client closed before its first bytes were read: " + errText(err), Err: err}, 0)
		return
	}
	var sniNote string
	if check {
		if why := unfinished(res, err); why != "" {
			detail := "SNI check could not finish: " + why + " (" + ev.wl.Policy + ")"
			if e := s.sniVerdict(ev, detail, enforce); e != nil {
				s.refuseTransparent(ctx, ev, c, res.Proto, e)
				return
			}
			sniNote, ev.dec.WouldDeny = ev.dec.WouldDeny, ""
		}
	}

	wctx, stop := watchClient(ctx, c, nil, nil)
	s.tunnel(wctx, ev, &target{transparent: true, orig: orig, sniffed: res, tunnel: true, wouldDeny: sniNote},
		c, stop, &transparentSide{s: s, ctx: ctx, c: c, l: l, res: &res}, tunnelOpts{})
}

// routeTransparent decides a redirected connection: it sets a's
// destination to log and judge by, the destination to dial, and the
// routes' decision (the workload's policy then judges a.dest, and
// pinOriginal checks the dial).
//
// Without a usable sniffed name (unknown protocol, no SNI, an IP literal in
// Host) the connection is routed, judged and dialled by its original
// address. With a name, a client could lie (SNI "allowed.example" towards
// another address), and the name is what routes and policies would judge;
// so the connection is judged by what egret connects to:
//   - a deny for the original address wins, whatever the name says;
//   - an upstream decision for the name sends a CONNECT to the name: the
//     upstream reaches what the name says, exactly what an explicit client
//     naming it would get, never the unverified address — judged by the
//     name, reached by the name;
//   - a direct decision for the name dials the original address, so the
//     name is accepted only when its one lookup (the answer the routes and
//     the policy judge) includes that address; otherwise the name is
//     ignored, a warning is logged with the name (sniffed_name in the access
//     log), and the connection is routed, judged and dialled by its address.
func (s *Server) routeTransparent(ctx context.Context, ev *event, a *admission, orig netip.AddrPort, res sniff.Result) {
	ip := ipaddr.Plain(orig.Addr())
	byAddr := route.Dest{Host: ip.String(), Port: orig.Port(), Addr: ip}
	addrDec := a.st.Routes.Decide(ctx, byAddr, &a.names)
	a.dest, a.dial, a.dec = byAddr, byAddr, addrDec
	a.dial.Addr = orig.Addr() // keeps an IPv6 zone for the dial
	if res.Host == "" {
		return
	}
	if _, err := netip.ParseAddr(res.Host); err == nil {
		return
	}
	byName, err := route.NewDest(res.Host, orig.Port())
	if err != nil {
		s.log.Debug("transparent: sniffed name unusable; routing by address", "name", res.Host, logOrigDst, orig.String(), "error", err.Error())
		return
	}
	if addrDec.Action == route.Deny {
		return
	}
	nameDec := a.st.Routes.Decide(ctx, byName, &a.names)
	switch nameDec.Action {
	case route.Deny, route.Upstream:
		a.dest, a.dial, a.dec = byName, byName, nameDec
		return
	}
	// Direct by name: the original address is dialled, so the name must
	// stand for it.
	addrs, _ := a.names.LookupNetIP(ctx, "ip", byName.Host)
	for _, x := range addrs {
		if ipaddr.Plain(x) == ip {
			a.dest, a.dial, a.dec = byName, byName, nameDec
			a.dial.Addr = orig.Addr()
			return
		}
	}
	ev.sniffedName = byName.Host
	s.log.Warn("transparent: sniffed name does not resolve to the original destination; routing by address",
		"name", byName.Host, logOrigDst, orig.String(), "name_route", nameDec.Detail(), "addr_route", addrDec.Detail())
}

// pinOriginal holds a transparent connection's direct dial to what was
// judged: the original address is the only address it dials, so when the
// routes or the policy let the name through by some of its addresses
// (route.Decision.Addrs), the original address must be one of them, else
// the connection is denied.
func (s *Server) pinOriginal(a *admission, orig netip.AddrPort) {
	if a.dec.Action != route.Direct || !a.dial.Addr.IsValid() {
		return
	}
	ip := ipaddr.Plain(orig.Addr())
	if a.dec.Addrs != nil && !slices.Contains(a.dec.Addrs, ip) {
		a.dec = unapproved(a.dec, "it approves "+joinAddrs(a.dec.Addrs)+" of "+a.dest.Host+", not the original destination "+ip.String())
		return
	}
	a.dec.Addrs = nil // the dial goes to a.dial.Addr
}

func joinAddrs(as []netip.Addr) string {
	var b strings.Builder
	for i, a := range as {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.String())
	}
	return b.String()
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

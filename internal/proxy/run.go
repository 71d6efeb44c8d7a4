package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"egret.io/egret/internal/admin"
	"egret.io/egret/internal/config"
	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/rss"
	"egret.io/egret/internal/socks5"
	"egret.io/egret/internal/upstream"
)

// RunOptions are what Run needs beside the configuration.
type RunOptions struct {
	Version string
	Logger  *slog.Logger // operational log
	// AccessLog receives the access log lines when the configuration
	// enables them (usually the same output as Logger's); nil discards them.
	AccessLog io.Writer
	// Listen creates listeners; nil means net.Listen.
	Listen func(network, addr string) (net.Listener, error)
	// Started, when set, is called once every listener is up, with their
	// addresses (useful when a port is 0).
	Started func(Addrs)
}

// Addrs are the addresses Run listens on ("" when a listener is off).
type Addrs struct {
	Proxy, Admin       string
	Transparent, SOCKS string
	// TransparentIPv6 is [::1]:port beside a loopback Transparent address,
	// where ip6tables REDIRECT delivers IPv6 connections.
	TransparentIPv6 string
}

// BuildState turns a configuration into the proxy's routing state.
func BuildState(cfg *config.Proxy) (*State, error) {
	tbl, err := route.New(cfg.Rules, cfg.Default, cfg.DefaultPool)
	if err != nil {
		return nil, err
	}
	st := &State{Routes: tbl, Pools: map[string]*upstream.Pool{}, DefaultPool: config.DefaultPool}
	for name, ms := range cfg.Pools {
		p := &upstream.Pool{Name: name, Members: ms, ConnectTimeout: positive(cfg.Timeouts.UpstreamConnect)}
		if o, ok := cfg.PoolOptions[name]; ok {
			p.Policy, p.Backoff = o.Policy, o.Backoff
			if o.RootCAs != nil || o.ServerName != "" {
				p.TLSConfig = &tls.Config{RootCAs: o.RootCAs, ServerName: o.ServerName}
			}
		}
		st.Pools[name] = p
	}
	for name, o := range cfg.PoolOptions {
		if st.Pools[name] == nil { // a pool whose member file is empty for now
			st.Pools[name] = &upstream.Pool{Name: name, Policy: o.Policy, Backoff: o.Backoff, ConnectTimeout: positive(cfg.Timeouts.UpstreamConnect)}
		}
	}
	return st, nil
}

// BuildProtection turns the configuration's gateway hardening and limits
// into the proxy's Protection.
func BuildProtection(cfg *config.Proxy) Protection {
	var p Protection
	p.ClientCIDRs = cfg.Gateway.ClientCIDRs
	if cfg.Gateway.SSRFGuard {
		p.Guard = &resolve.Guard{Allow: cfg.Gateway.AllowCIDRs, Own: resolve.OwnAddrs()}
	}
	l := cfg.Limits
	if l.Breaker.Failures > 0 {
		p.Breakers = limit.NewBreakers(l.Breaker)
	}
	if d := (&limit.Destinations{Default: l.PerDestination, Rules: l.Destinations}); d.Enabled() {
		p.Destinations = d
	}
	if l.ClientMaxConcurrent > 0 {
		p.Clients = &limit.Clients{MaxConcurrent: l.ClientMaxConcurrent}
	}
	if l.ClientMaxConnections > 0 {
		p.ClientConns = &limit.Clients{MaxConcurrent: l.ClientMaxConnections, Kind: limit.KindClientConns}
	}
	if l.MaxTunnels > 0 {
		p.Tunnels = &limit.Counter{Max: int64(l.MaxTunnels)}
	}
	return p
}

// Run serves the configuration until ctx is done, then drains: readiness
// fails at once, listeners keep accepting for DrainPeriod, then stop, and
// open requests and tunnels get DrainTimeout to finish. It returns nil after
// a clean drain.
func Run(ctx context.Context, cfg *config.Proxy, ro RunOptions) error {
	log := ro.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	listen := ro.Listen
	if listen == nil {
		listen = listenTCP
	}
	for _, n := range cfg.Notes {
		log.Warn("config", "note", n)
	}
	m := metrics.New(ro.Version)
	res := resolve.New(cfg.Resolver, nil)
	st, err := BuildState(cfg)
	if err != nil {
		return err
	}
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	creds, err := startCredentials(bg, cfg, st, m, log)
	if err != nil {
		return err
	}
	opts := Options{
		Via: cfg.Via,
		Timeouts: Timeouts{
			Dial: cfg.Timeouts.Dial, UpstreamConnect: cfg.Timeouts.UpstreamConnect,
			HeaderRead: cfg.Timeouts.HeaderRead, ClientIdle: cfg.Timeouts.ClientIdle,
			TunnelIdle: cfg.Timeouts.TunnelIdle, ResponseHeader: cfg.Timeouts.ResponseHeader,
		},
		Resolver:   res,
		Logger:     log,
		Metrics:    m,
		Protection: BuildProtection(cfg),
	}
	if cfg.AccessLog {
		opts.AccessLog = ro.AccessLog
	}
	s, err := New(opts, st)
	if err != nil {
		return err
	}
	s.watchPools(bg, cfg, st, m)
	m.SetLive(s.liveMetrics())
	if opts.Protection.Tunnels != nil {
		m.SetTunnelsLimit(opts.Protection.Tunnels.Max)
	}

	var ready atomic.Bool
	var draining atomic.Bool
	started := time.Now()
	var addrs Addrs
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	pl, err := listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	lns = append(lns, pl)
	addrs.Proxy = pl.Addr().String()
	var adminSrv *http.Server
	if cfg.AdminListen != "" {
		al, err := listen("tcp", cfg.AdminListen)
		if err != nil {
			closeAll()
			return fmt.Errorf("admin listener: %w", err)
		}
		lns = append(lns, al)
		addrs.Admin = al.Addr().String()
		adminSrv = &http.Server{
			Handler: admin.Handler(admin.Options{
				Metrics: m,
				PProf:   cfg.PProf,
				Token:   adminToken(cfg.AdminTokenFile),
				Ready: func() (bool, string) {
					switch {
					case draining.Load():
						return false, "draining"
					case !ready.Load():
						return false, "starting"
					}
					if cfg.ReadyNeedsUpstream {
						if why := s.unusablePool(time.Now()); why != "" {
							return false, why
						}
					}
					return true, ""
				},
				Status: func() admin.Status {
					return status(s, cfg, creds, ro.Version, started, addrs, ready.Load() && !draining.Load())
				},
			}),
			ReadHeaderTimeout: 5 * time.Second,
		}
		s.NoteListener(al.Addr())
	}
	var tlns []net.Listener
	var sl net.Listener
	if cfg.TransparentListen != "" {
		if tlns, err = listenTransparent(listen, cfg.TransparentListen, log); err != nil {
			closeAll()
			return fmt.Errorf("transparent listener: %w", err)
		}
		lns = append(lns, tlns...)
		addrs.Transparent = tlns[0].Addr().String()
		if len(tlns) > 1 {
			addrs.TransparentIPv6 = tlns[1].Addr().String()
		}
	}
	if cfg.SOCKSListen != "" {
		if sl, err = listen("tcp", cfg.SOCKSListen); err != nil {
			closeAll()
			return fmt.Errorf("socks listener: %w", err)
		}
		lns = append(lns, sl)
		addrs.SOCKS = sl.Addr().String()
	}

	var wg sync.WaitGroup
	errc := make(chan error, 5)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Serve(pl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("proxy listener: %w", err)
		}
	}()
	if adminSrv != nil {
		go func() {
			if err := adminSrv.Serve(lns[1]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("admin listener: %w", err)
			}
		}()
	}
	// Drop the code pages only package initialisation touched (the
	// Kubernetes libraries of other egret commands); see package rss.
	if n, err := rss.ReleaseCode(); err != nil {
		log.Debug("release start-up pages", "error", err.Error())
	} else {
		log.Debug("released start-up pages", "bytes", n)
	}
	tctx, stopTrim := context.WithCancel(context.Background())
	defer stopTrim()
	go trimMemory(tctx)
	serveRaw := func(name string, serve func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", name, err)
			}
		}()
	}
	for _, tl := range tlns {
		serveRaw("transparent", func() error { return s.ServeTransparent(tl, TransparentOptions{}) })
	}
	if sl != nil {
		var so SOCKSOptions
		if a := cfg.SOCKSAuth; a != nil {
			so.Auth.Check = socks5.StaticCredentials(a.User, a.Password)
		}
		serveRaw("socks", func() error { return s.ServeSOCKS(sl, so) })
	}
	ready.Store(true)
	m.Ready.Set(1)
	log.Info("egret proxy ready", "role", string(cfg.Role), "listen", addrs.Proxy, "admin", addrs.Admin,
		"transparent", addrs.Transparent, "transparent_ipv6", addrs.TransparentIPv6, "socks", addrs.SOCKS,
		"default_route", routeString(cfg.Default, cfg.DefaultPool), "rules", len(cfg.Rules), "pools", poolSummary(cfg),
		"startup_ms", float64(time.Since(started).Microseconds())/1000)
	if ro.Started != nil {
		ro.Started(addrs)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		log.Error("listener failed", "error", runErr.Error())
	}
	draining.Store(true)
	m.Ready.Set(0)
	if runErr == nil && cfg.DrainPeriod > 0 {
		log.Info("draining: readiness is failing; still accepting", "period", cfg.DrainPeriod.String())
		time.Sleep(cfg.DrainPeriod)
	}
	log.Info("draining: stopped accepting; waiting for open requests and tunnels",
		"open_tunnels", s.OpenTunnels(), "timeout", cfg.DrainTimeout.String())
	dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	if err := s.Shutdown(dctx); err != nil {
		log.Warn("drain deadline reached; closed what was left", "error", err.Error())
	}
	if adminSrv != nil {
		adminSrv.Close()
	}
	wg.Wait()
	log.Info("egret proxy stopped")
	return runErr
}

// adminToken is the status page's token source: the file, or none.
func adminToken(file string) func() (string, error) {
	if file == "" {
		return nil
	}
	return admin.TokenFile(file)
}

func routeString(a route.Action, pool string) string {
	if a == route.Upstream && pool != "" {
		return "upstream:" + pool
	}
	return a.String()
}

func poolSummary(cfg *config.Proxy) string {
	names := make([]string, 0, len(cfg.Pools))
	for n, ms := range cfg.Pools {
		names = append(names, fmt.Sprintf("%s(%d)", n, len(ms)))
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func status(s *Server, cfg *config.Proxy, creds *credentialState, version string, started time.Time, addrs Addrs, ready bool) admin.Status {
	st := s.State()
	out := admin.Status{
		Version: version, Role: string(cfg.Role), Started: started, Ready: ready,
		OpenTunnels: s.OpenTunnels(),
		Default:     routeString(st.Routes.Default().Action, st.Routes.Default().Pool),
	}
	if !ready {
		out.NotReady = "draining"
	}
	out.Listeners = append(out.Listeners, "proxy "+addrs.Proxy)
	if addrs.Admin != "" {
		out.Listeners = append(out.Listeners, "admin "+addrs.Admin)
	}
	for _, a := range []string{addrs.Transparent, addrs.TransparentIPv6} {
		if a != "" {
			out.Listeners = append(out.Listeners, "transparent "+a)
		}
	}
	if addrs.SOCKS != "" {
		out.Listeners = append(out.Listeners, "socks5 "+addrs.SOCKS)
	}
	for i, r := range st.Routes.Rules() {
		out.Routes = append(out.Routes, admin.RouteStatus{Index: i, Match: matchString(r.Match), Action: routeString(r.Action, r.Pool), Source: r.Source, Report: r.Report})
	}
	s.fillStatus(&out, cfg)
	if creds != nil {
		out.Credentials = creds.status()
	}
	return out
}

func matchString(m route.Match) string {
	var parts []string
	if m.Any {
		parts = append(parts, "*")
	}
	parts = append(parts, m.Hosts...)
	for _, s := range m.Suffixes {
		parts = append(parts, s.String())
	}
	for _, p := range m.CIDRs {
		parts = append(parts, p.String())
	}
	s := strings.Join(parts, ",")
	if len(m.Ports) > 0 {
		ps := make([]string, len(m.Ports))
		for i, p := range m.Ports {
			ps[i] = fmt.Sprint(p)
		}
		s += " port " + strings.Join(ps, ",")
	}
	return s
}

// listenTCP listens like net.Listen, but without TCP keep-alive probes on
// loopback listeners: a sidecar's clients are in the same pod, so the probes
// would only cost four system calls per accepted connection. Listeners on
// other addresses (a gateway) keep Go's default probes, which find clients
// that vanished behind a NAT.
func listenTCP(network, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	if config.LoopbackListen(addr) {
		lc.KeepAlive = -1
	}
	return lc.Listen(context.Background(), network, addr)
}

// unusablePool names a pool that routes send traffic to and that has no
// member out of back-off, or returns "".
func (s *Server) unusablePool(now time.Time) string {
	st := s.State()
	used := map[string]bool{}
	if d := st.Routes.Default(); d.Action == route.Upstream {
		used[d.Pool] = true
	}
	for _, r := range st.Routes.Rules() {
		if r.Action == route.Upstream {
			used[r.Pool] = true
		}
	}
	for name := range used {
		p := st.pool(name)
		if p == nil {
			continue
		}
		ok := false
		for _, m := range p.Current() {
			if m.Healthy(now) {
				ok = true
				break
			}
		}
		if !ok {
			return "every member of pool " + p.Name + " is down"
		}
	}
	return ""
}

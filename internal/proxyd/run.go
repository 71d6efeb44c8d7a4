package proxyd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"egret.io/egret/internal/admin"
	"egret.io/egret/internal/config"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/socks5"
	"egret.io/egret/internal/trust"
	"egret.io/egret/internal/upstream"
)

// Options are what Run needs beside the configuration.
type Options struct {
	Version string
	Logger  *slog.Logger // operational log
	// AccessLog receives the access log lines when the configuration
	// enables them (usually the same output as Logger's); nil discards them.
	AccessLog io.Writer
	// Listen creates listeners; nil means net.Listen (without TCP
	// keep-alive probes on loopback).
	Listen func(network, addr string) (net.Listener, error)
	// Started, when set, is called once every listener is up, with their
	// addresses (useful when a port is 0).
	Started func(Addrs)
	// Reload re-reads and validates the whole configuration; nil turns
	// live reloads off.
	Reload func() (*config.Proxy, error)
	// ConfigFile is watched when Reload is set: a change (a mounted
	// ConfigMap swapping its ..data link) reloads; "" watches nothing.
	ConfigFile string
	// Hangup, when set with Reload, delivers the signals that reload
	// (SIGHUP).
	Hangup <-chan os.Signal
}

// Addrs are the addresses Run listens on ("" when a listener is off).
type Addrs struct {
	Proxy, Admin       string
	Transparent, SOCKS string
	// TransparentIPv6 is [::1]:port beside a loopback Transparent address,
	// where ip6tables REDIRECT delivers IPv6 connections.
	TransparentIPv6 string
}

// process is one running egret proxy: the server and what follows it.
type process struct {
	o       Options
	log     *slog.Logger
	m       *metrics.Metrics
	s       *proxy.Server
	server  atomic.Pointer[proxy.Server] // s, for goroutines started before it
	prot    proxy.Protection
	health  *upstream.Health
	creds   *credentialState
	bg      context.Context // the watches' context: ends with Run
	started time.Time
	addrs   Addrs

	ready, draining atomic.Bool

	boot *config.Proxy // the configuration the process started with: its listeners, timeouts, limits

	mu      sync.Mutex
	cfg     *config.Proxy      // the configuration in force: its routes, rules and pools
	stopGen context.CancelFunc // ends the member watches and probes of the state in force
	reloads reloadStatus

	policy *policy.Engine // per-workload egress; nil when off
}

// current returns the configuration in force.
func (p *process) current() *config.Proxy {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// Run serves the configuration until ctx is done, then drains: readiness
// fails at once, listeners keep accepting for DrainPeriod, then stop, and
// open requests and tunnels get DrainTimeout to finish. It returns nil after
// a clean drain.
func Run(ctx context.Context, cfg *config.Proxy, o Options) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, n := range cfg.Notes {
		log.Warn("config", "note", n)
	}
	if cfg.TrustDigest != "" {
		// The CA bundle egret's webhook mounted must be the one it verified
		// at admission: a ConfigMap of that name egret did not write never
		// becomes this pod's trust (issue 21, finding 9).
		if err := trust.VerifyDir(cfg.TrustDir, cfg.TrustDigest); err != nil {
			return err
		}
		log.Info("trust bundle verified", "dir", cfg.TrustDir, "digest", cfg.TrustDigest)
	}
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	p := &process{o: o, log: log, m: metrics.New(o.Version), health: &upstream.Health{}, bg: bg, started: time.Now(), boot: cfg, cfg: cfg}
	creds, err := startCredentials(bg, cfg, p, log)
	if err != nil {
		return err
	}
	if creds == nil {
		if creds, err = startUpstreamToken(bg, cfg, p, log); err != nil {
			return err
		}
	}
	p.creds = creds
	st, err := BuildState(cfg, p.health, creds.storeOrNil())
	if err != nil {
		return err
	}
	opts := options(cfg)
	opts.Resolver = resolve.New(cfg.Resolver, nil)
	opts.Logger, opts.Metrics = log, p.m
	if cfg.AccessLog {
		opts.AccessLog = o.AccessLog
	}
	p.prot = opts.Protection
	if opts.Workloads, err = startPolicy(bg, cfg, p, st, log); err != nil {
		return err
	}
	if opts.Intercept, err = startIntercept(bg, cfg, opts.AccessLog, log); err != nil {
		return err
	}
	if opts.Intercept != nil {
		p.m.SetIntercept(InterceptMetrics(opts.Intercept))
	}
	if p.s, err = proxy.New(opts, st); err != nil {
		return err
	}
	p.server.Store(p.s)
	p.follow(cfg, st)
	p.m.SetLive(p.liveMetrics())
	if t := p.prot.Tunnels; t != nil {
		p.m.SetTunnelsLimit(t.Max)
	}
	return p.serve(ctx, cfg)
}

// serve opens the listeners, serves until ctx is done or a listener fails,
// and drains.
func (p *process) serve(ctx context.Context, cfg *config.Proxy) error {
	listen := p.o.Listen
	if listen == nil {
		listen = listenTCP
	}
	log, s := p.log, p.s
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
	p.addrs.Proxy = pl.Addr().String()
	var adminSrv *http.Server
	var al net.Listener
	if cfg.AdminListen != "" {
		if al, err = listen("tcp", cfg.AdminListen); err != nil {
			closeAll()
			return fmt.Errorf("admin listener: %w", err)
		}
		lns = append(lns, al)
		p.addrs.Admin = al.Addr().String()
		adminSrv = &http.Server{Handler: p.adminHandler(cfg), ReadHeaderTimeout: 5 * time.Second}
		s.NoteListener(al.Addr())
	}
	var tlns []net.Listener
	if cfg.TransparentListen != "" {
		if tlns, err = listenTransparent(listen, cfg.TransparentListen, log); err != nil {
			closeAll()
			return fmt.Errorf("transparent listener: %w", err)
		}
		lns = append(lns, tlns...)
		p.addrs.Transparent = tlns[0].Addr().String()
		if len(tlns) > 1 {
			p.addrs.TransparentIPv6 = tlns[1].Addr().String()
		}
	}
	var sl net.Listener
	if cfg.SOCKSListen != "" {
		if sl, err = listen("tcp", cfg.SOCKSListen); err != nil {
			closeAll()
			return fmt.Errorf("socks listener: %w", err)
		}
		lns = append(lns, sl)
		p.addrs.SOCKS = sl.Addr().String()
	}

	var wg sync.WaitGroup
	errc := make(chan error, 5)
	run := func(name string, serve func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", name, err)
			}
		}()
	}
	run("proxy", func() error { return s.Serve(pl) })
	if adminSrv != nil {
		go func() {
			if err := adminSrv.Serve(al); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("admin listener: %w", err)
			}
		}()
	}
	for _, tl := range tlns {
		run("transparent", func() error { return s.ServeTransparent(tl, proxy.TransparentOptions{}) })
	}
	if sl != nil {
		var so proxy.SOCKSOptions
		if a := cfg.SOCKSAuth; a != nil {
			so.Auth.Check = socks5.StaticCredentials(a.User, a.Password)
		}
		run("socks", func() error { return s.ServeSOCKS(sl, so) })
	}
	// Drop the code pages only package initialisation touched (the
	// Kubernetes libraries of other egret commands); see releaseCode.
	if n, err := releaseCode(); err != nil {
		log.Debug("release start-up pages", "error", err.Error())
	} else {
		log.Debug("released start-up pages", "bytes", n)
	}
	go trimMemory(p.bg)
	p.watchReloads()
	p.ready.Store(true)
	p.m.Ready.Set(1)
	log.Info("egret proxy ready", "role", string(cfg.Role), "listen", p.addrs.Proxy, "admin", p.addrs.Admin,
		"transparent", p.addrs.Transparent, "transparent_ipv6", p.addrs.TransparentIPv6, "socks", p.addrs.SOCKS,
		"default_route", routeString(cfg.Default, cfg.DefaultPool), "rules", len(cfg.Rules), "pools", poolSummary(cfg),
		"startup_ms", float64(time.Since(p.started).Microseconds())/1000)
	if p.o.Started != nil {
		p.o.Started(p.addrs)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		log.Error("listener failed", "error", runErr.Error())
	}
	p.draining.Store(true)
	p.m.Ready.Set(0)
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

// adminHandler is the admin listener's handler: probes, metrics and the
// status page, which shows the configuration in force.
func (p *process) adminHandler(cfg *config.Proxy) http.Handler {
	var token func() (string, error)
	if cfg.AdminTokenFile != "" {
		token = admin.TokenFile(cfg.AdminTokenFile)
	}
	return admin.Handler(admin.Options{
		Metrics: p.m,
		PProf:   cfg.PProf,
		Token:   token,
		Ready: func() (bool, string) {
			switch {
			case p.draining.Load():
				return false, "draining"
			case !p.ready.Load():
				return false, "starting"
			}
			if p.current().ReadyNeedsUpstream {
				if why := p.unusablePool(time.Now()); why != "" {
					return false, why
				}
			}
			return true, ""
		},
		Status: p.status,
	})
}

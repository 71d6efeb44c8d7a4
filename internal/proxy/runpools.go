package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"egret.io/egret/internal/admin"
	"egret.io/egret/internal/config"
	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/upstream"
	"egret.io/egret/internal/watch"
)

// credentialState follows the credentials directory for the status page.
type credentialState struct {
	dir   string
	store *credentials.Store

	mu         sync.Mutex
	lastReload time.Time
	lastErr    string
}

func (c *credentialState) status() *admin.CredentialStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &admin.CredentialStatus{Dir: c.dir, LastReload: c.lastReload, LastError: c.lastErr, Rotating: c.store.Rotating()}
}

// startCredentials loads the credentials directory, gives its store to
// every pool (for members without credentials of their own) and re-reads
// it on change until ctx ends. It returns nil when no directory is
// configured.
func startCredentials(ctx context.Context, cfg *config.Proxy, st *State, m *metrics.Metrics, log *slog.Logger) (*credentialState, error) {
	dir := cfg.Credentials.Dir
	if dir == "" {
		return nil, nil
	}
	cs := &credentialState{dir: dir, store: credentials.NewStore(nil)}
	d := &credentials.Dir{Path: dir, Interval: cfg.Credentials.CheckInterval, Store: cs.store}
	if err := d.Load(); err != nil {
		if cfg.Credentials.Required {
			return nil, err
		}
		log.Warn("credentials directory unreadable; members without credentials will not authenticate until it is", "dir", dir, "error", err.Error())
		cs.lastErr = err.Error()
	} else {
		cs.lastReload = time.Now()
	}
	var pools []*upstream.Pool
	for _, p := range st.Pools {
		p.Credentials = cs.store
		pools = append(pools, p)
	}
	d.Reloaded = func(err error) {
		res := "ok"
		cs.mu.Lock()
		if err != nil {
			res, cs.lastErr = "error", err.Error()
		} else {
			cs.lastReload, cs.lastErr = time.Now(), ""
		}
		cs.mu.Unlock()
		if m != nil {
			m.ConfigReloads.WithLabelValues("credentials", res).Inc()
		}
		if err != nil {
			log.Error("upstream credentials not reloaded; the previous ones stay in use", "dir", dir, "error", err.Error())
			return
		}
		// Members that failed with the old credential get a fresh chance.
		for _, p := range pools {
			if p.Credentials == cs.store {
				p.ResetHealth()
			}
		}
		log.Info("upstream credentials reloaded; the previous ones are kept until the new ones work", "dir", dir)
	}
	go d.Run(ctx)
	return cs, nil
}

// watchPools starts the member-file watches and the probes of the pools.
func (s *Server) watchPools(ctx context.Context, cfg *config.Proxy, st *State, m *metrics.Metrics) {
	for name, o := range cfg.PoolOptions {
		p := st.Pools[name]
		if p == nil {
			continue
		}
		if o.MembersFile != "" {
			s.watchMembers(ctx, cfg, p, o, m)
		}
		if o.Probe.Target != "" {
			go p.RunProbes(ctx, o.Probe)
		}
	}
}

func (s *Server) watchMembers(ctx context.Context, cfg *config.Proxy, p *upstream.Pool, o config.PoolOptions, m *metrics.Metrics) {
	w := &watch.Files{
		Paths:    []string{o.MembersFile},
		Interval: cfg.Credentials.CheckInterval,
		Load: func(c [][]byte) error {
			ms, err := upstream.ParseMemberList(string(c[0]))
			if err != nil {
				return fmt.Errorf("members file %s: %w", o.MembersFile, err)
			}
			removed := p.SetMembers(append(append([]*upstream.Member(nil), o.Static...), ms...))
			s.RetireConnections()
			if m != nil {
				m.ConfigReloads.WithLabelValues("members", "ok").Inc()
			}
			s.log.Info("upstream members reloaded", "pool", p.Name, "file", o.MembersFile, "members", len(p.Current()), "removed", len(removed))
			return nil
		},
		Failed: func(err error) {
			if m != nil {
				m.ConfigReloads.WithLabelValues("members", "error").Inc()
			}
			s.log.Error("upstream members not reloaded; the previous ones stay in use", "pool", p.Name, "error", err.Error())
		},
	}
	// The file was read when the configuration was loaded: report changes
	// from that content on.
	if _, err := w.Read(); err != nil {
		s.log.Warn("members file unreadable", "pool", p.Name, "error", err.Error())
	}
	go w.Run(ctx)
}

// liveMetrics exports member health and breaker states at scrape time.
func (s *Server) liveMetrics() metrics.Live {
	l := metrics.Live{Members: func() []metrics.MemberSample {
		var out []metrics.MemberSample
		now := time.Now()
		for name, p := range s.State().Pools {
			for _, m := range p.Current() {
				out = append(out, metrics.MemberSample{Pool: name, Member: m.Name, Healthy: m.State(now).Healthy})
			}
		}
		return out
	}}
	if b := s.opts.Protection.Breakers; b != nil {
		l.Breakers = func() (int, int) {
			_, c := b.Status()
			return c[limit.Open], c[limit.HalfOpen]
		}
	}
	return l
}

// fillStatus adds pools, breakers, traffic and protection to a status.
func (s *Server) fillStatus(out *admin.Status, cfg *config.Proxy) {
	st := s.State()
	now := time.Now()
	names := make([]string, 0, len(st.Pools))
	for n := range st.Pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := st.Pools[n]
		ps := admin.PoolStatus{Name: n, Policy: policyName(p.Policy)}
		if cfg != nil {
			o := cfg.PoolOptions[n]
			ps.Probe, ps.File = o.Probe.Target, o.MembersFile
		}
		for _, m := range p.Current() {
			ms := m.State(now)
			mst := admin.MemberStatus{Name: ms.Name, Healthy: ms.Healthy, Backup: ms.Backup, Weight: ms.Weight, Active: ms.Active,
				Fails: ms.Fails, LastError: ms.LastError, Since: ms.Since, Rotating: ms.Rotating}
			switch {
			case ms.Healthy:
				ps.Healthy++
			case ms.Down:
				mst.RetryIn = ms.DownFor.Round(time.Millisecond).String()
			default:
				mst.RetryIn = "next request"
			}
			if !ms.ProbedAt.IsZero() {
				mst.Probe = "failed"
				if ms.ProbeOK {
					mst.Probe = "ok"
				}
			}
			ps.Members = append(ps.Members, mst)
		}
		out.Pools = append(out.Pools, ps)
	}
	pr := &s.opts.Protection
	if b := pr.Breakers; b != nil {
		list, _ := b.Status()
		sort.Slice(list, func(i, j int) bool {
			if list[i].State != list[j].State {
				return list[i].State > list[j].State
			}
			return list[i].Key < list[j].Key
		})
		for _, br := range list {
			bs := admin.BreakerStatus{Dest: br.Key, State: br.State.String(), Failures: br.Failures, LastError: br.LastError}
			if br.RetryIn > 0 {
				bs.RetryIn = br.RetryIn.Round(time.Millisecond).String()
			}
			out.Breakers = append(out.Breakers, bs)
		}
	}
	for _, t := range s.insights.Top(20) {
		out.Top = append(out.Top, admin.DestTraffic(t))
	}
	for _, r := range s.insights.Recent() {
		out.Recent = append(out.Recent, admin.RecentEvent(r))
	}
	if len(pr.ClientCIDRs) > 0 {
		out.Protection = append(out.Protection, fmt.Sprintf("clients allowed from %v", pr.ClientCIDRs))
	}
	if pr.Guard != nil {
		g := "SSRF guard: every destination that is not global unicast refused (private, loopback, link-local and metadata, CGNAT, ULA, multicast, reserved, IPv6 forms embedding them) and the gateway's own addresses"
		if len(pr.Guard.Allow) > 0 {
			g += fmt.Sprintf(" except %v", pr.Guard.Allow)
		}
		out.Protection = append(out.Protection, g)
	}
	if cfg != nil {
		l := cfg.Limits
		if l.Breaker.Failures > 0 {
			out.Protection = append(out.Protection, fmt.Sprintf("circuit breaker per destination after %d consecutive failures", l.Breaker.Failures))
		}
		if d := l.PerDestination; d.Rate > 0 || d.MaxConcurrent > 0 {
			out.Protection = append(out.Protection, fmt.Sprintf("per destination host: rate %g/s (burst %d), %d in flight (0 = no limit)", d.Rate, d.Burst, d.MaxConcurrent))
		}
		if len(l.Destinations) > 0 {
			out.Protection = append(out.Protection, fmt.Sprintf("%d destination-specific limits", len(l.Destinations)))
		}
		if l.ClientMaxConcurrent > 0 {
			out.Protection = append(out.Protection, fmt.Sprintf("per client: %d in flight", l.ClientMaxConcurrent))
		}
		if l.MaxTunnels > 0 {
			out.Protection = append(out.Protection, fmt.Sprintf("at most %d open tunnels", l.MaxTunnels))
		}
	}
}

func policyName(p upstream.Policy) string {
	if p == 0 {
		p = upstream.RoundRobin
	}
	return p.String()
}

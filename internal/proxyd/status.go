package proxyd

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"egret.io/egret/internal/admin"
	"egret.io/egret/internal/config"
	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxyauth"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

// status builds the status page's content from the state in force.
func (p *process) status() admin.Status {
	s, cfg := p.s, p.current()
	st := s.State()
	ready := p.ready.Load() && !p.draining.Load()
	out := admin.Status{
		Version: p.o.Version, Role: string(cfg.Role), Started: p.started, Ready: ready,
		OpenTunnels: s.OpenTunnels(),
		Default:     routeString(st.Routes.Default().Action, st.Routes.Default().Pool),
	}
	if !ready {
		out.NotReady = "draining"
	}
	a := p.addrs
	out.Listeners = append(out.Listeners, "proxy "+a.Proxy)
	if a.Admin != "" {
		out.Listeners = append(out.Listeners, "admin "+a.Admin)
	}
	for _, t := range []string{a.Transparent, a.TransparentIPv6} {
		if t != "" {
			out.Listeners = append(out.Listeners, "transparent "+t)
		}
	}
	if a.SOCKS != "" {
		out.Listeners = append(out.Listeners, "socks5 "+a.SOCKS)
	}
	for i, r := range st.Routes.Rules() {
		out.Routes = append(out.Routes, admin.RouteStatus{Index: i, Match: matchString(r.Match), Action: routeString(r.Action, r.Pool), Source: r.Source, Report: r.Report})
	}
	now := time.Now()
	names := make([]string, 0, len(st.Pools))
	for n := range st.Pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out.Pools = append(out.Pools, poolStatus(st.Pools[n], cfg.Pools[n], now))
	}
	if b := p.prot.Breakers; b != nil {
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
	top, recent := s.Traffic(20)
	for _, t := range top {
		out.Top = append(out.Top, admin.DestTraffic(t))
	}
	for _, r := range recent {
		out.Recent = append(out.Recent, admin.RecentEvent(r))
	}
	out.Protection = p.protection()
	if p.creds != nil {
		out.Credentials = p.creds.status()
	}
	out.Config = p.reloadStatus()
	return out
}

func poolStatus(pl *upstream.Pool, o config.Pool, now time.Time) admin.PoolStatus {
	ps := admin.PoolStatus{Name: pl.Name, Policy: policyName(pl.Policy), Probe: o.Probe.Target, File: o.MembersFile}
	for _, m := range pl.Current() {
		ms := m.State(now)
		mst := admin.MemberStatus{Name: ms.Name, Healthy: ms.Healthy, Backup: ms.Backup, Weight: ms.Weight, Active: ms.Active,
			Fails: ms.Fails, LastError: ms.LastError, Since: ms.Since, Rotating: ms.Rotating}
		switch m.Auth {
		case proxyauth.NTLM:
			mst.Auth = "ntlm"
		case proxyauth.Negotiate:
			mst.Auth = "negotiate " + m.ServicePrincipal()
		}
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
	return ps
}

// protection describes the hardening and limits in force, one line each.
func (p *process) protection() []string {
	var out []string
	pr := &p.prot
	if len(pr.ClientCIDRs) > 0 {
		out = append(out, fmt.Sprintf("clients allowed from %v", pr.ClientCIDRs))
	}
	if pr.Guard != nil {
		g := "SSRF guard: every destination that is not global unicast refused (private, loopback, link-local and metadata, CGNAT, ULA, multicast, reserved, IPv6 forms embedding them) and the gateway's own addresses"
		if len(pr.Guard.Allow) > 0 {
			g += fmt.Sprintf(" except %v", pr.Guard.Allow)
		}
		out = append(out, g)
	}
	if b := pr.Breakers; b != nil {
		out = append(out, fmt.Sprintf("circuit breaker per destination after %d consecutive failures", b.Config().Failures))
	}
	if d := pr.Destinations; d != nil {
		if l := d.Default; l.Rate > 0 || l.MaxConcurrent > 0 {
			out = append(out, fmt.Sprintf("per destination host: rate %g/s (burst %d), %d in flight (0 = no limit)", l.Rate, l.Burst, l.MaxConcurrent))
		}
		if len(d.Rules) > 0 {
			out = append(out, fmt.Sprintf("%d destination-specific limits", len(d.Rules)))
		}
	}
	if c := pr.Clients; c != nil {
		out = append(out, fmt.Sprintf("per client: %d requests and tunnels in flight", c.MaxConcurrent))
	}
	if c := pr.ClientConns; c != nil {
		out = append(out, fmt.Sprintf("per client: %d connections open", c.MaxConcurrent))
	}
	if t := pr.Tunnels; t != nil {
		out = append(out, fmt.Sprintf("at most %d open tunnels", t.Max))
	}
	return out
}

// liveMetrics exports member health and breaker states at scrape time.
func (p *process) liveMetrics() metrics.Live {
	l := metrics.Live{Members: func() []metrics.MemberSample {
		var out []metrics.MemberSample
		now := time.Now()
		for name, pl := range p.s.State().Pools {
			for _, m := range pl.Current() {
				out = append(out, metrics.MemberSample{Pool: name, Member: m.Name, Healthy: m.State(now).Healthy})
			}
		}
		return out
	}}
	if b := p.prot.Breakers; b != nil {
		l.Breakers = func() (int, int) {
			_, c := b.Status()
			return c[limit.Open], c[limit.HalfOpen]
		}
	}
	return l
}

// unusablePool names a pool that routes send traffic to and that has no
// member out of back-off, or returns "".
func (p *process) unusablePool(now time.Time) string {
	st := p.s.State()
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
		if name == "" {
			name = st.DefaultPool
		}
		pl := st.Pools[name]
		if pl == nil {
			continue
		}
		ok := false
		for _, m := range pl.Current() {
			if m.Healthy(now) {
				ok = true
				break
			}
		}
		if !ok {
			return "every member of pool " + pl.Name + " is down"
		}
	}
	return ""
}

func policyName(p upstream.Policy) string {
	if p == 0 {
		p = upstream.RoundRobin
	}
	return p.String()
}

func routeString(a route.Action, pool string) string {
	if a == route.Upstream && pool != "" {
		return "upstream:" + pool
	}
	return a.String()
}

func poolSummary(cfg *config.Proxy) string {
	names := make([]string, 0, len(cfg.Pools))
	for n, pc := range cfg.Pools {
		names = append(names, fmt.Sprintf("%s(%d)", n, len(pc.Members)))
	}
	sort.Strings(names)
	return strings.Join(names, ",")
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

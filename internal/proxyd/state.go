package proxyd

import (
	"crypto/tls"
	"net/netip"
	"net/url"
	"strings"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

// BuildState turns a configuration into the proxy's routing state: the
// route table and a pool per configured pool. health keeps the members'
// health across rebuilds (nil: each pool keeps its own); store is given to
// members without credentials of their own (nil: none).
func BuildState(cfg *config.Proxy, health *upstream.Health, store *credentials.Store) (*proxy.State, error) {
	tbl, err := route.New(cfg.Rules, cfg.Default, cfg.DefaultPool)
	if err != nil {
		return nil, err
	}
	st := &proxy.State{Routes: tbl, Pools: map[string]*upstream.Pool{}, DefaultPool: config.DefaultPool}
	for name, pc := range cfg.Pools {
		p := &upstream.Pool{Name: name, Members: newMembers(pc.Members), Policy: pc.Policy, Backoff: pc.Backoff,
			ConnectTimeout: positive(cfg.Timeouts.UpstreamConnect), Health: health, Credentials: store}
		if cfg.Credentials.TokenFile != "" {
			// The pod's token goes to the gateway it was injected for
			// and nowhere else.
			p.CredentialsFor = func(m *upstream.Member) bool { return name == config.DefaultPool && TokenTarget(m.URL) }
		}
		if pc.RootCAs != nil || pc.ServerName != "" {
			p.TLSConfig = &tls.Config{RootCAs: pc.RootCAs, ServerName: pc.ServerName}
		}
		st.Pools[name] = p
	}
	return st, nil
}

// TokenTarget reports whether a sidecar's service-account token may be
// sent to the proxy at u (in the default pool: the gateway the webhook
// injected, UPSTREAM_PROXY): over TLS (https://), or in clear only to a
// host on the cluster's network — a Service name (".svc", ".svc.<cluster
// domain>") or a private address (RFC 1918, RFC 6598, IPv6 unique local,
// loopback: the pod itself).
// Never over SOCKS5, which has no place for it.
func TokenTarget(u *url.URL) bool {
	switch u.Scheme {
	case "https":
		return true
	case "http":
	default:
		return false
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		return a.IsPrivate() || a.IsLoopback() || cgnat.Contains(a)
	}
	return strings.HasSuffix(host, ".svc") || strings.Contains(host, ".svc.")
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// newMembers makes the live members of specs.
func newMembers(specs []upstream.MemberSpec) []*upstream.Member {
	out := make([]*upstream.Member, len(specs))
	for i, s := range specs {
		out[i] = upstream.NewMember(s)
	}
	return out
}

// BuildProtection turns the configuration's gateway hardening and limits
// into the proxy's Protection.
func BuildProtection(cfg *config.Proxy) proxy.Protection {
	var p proxy.Protection
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

// Options turns the configuration's fixed settings into the proxy's
// Options (dependencies are added by Run).
func options(cfg *config.Proxy) proxy.Options {
	return proxy.Options{Via: cfg.Via, Timeouts: cfg.Timeouts, Protection: BuildProtection(cfg),
		ShortNames: proxy.ShortNames{On: cfg.Role == config.RoleGateway && !cfg.Gateway.ResolveShortNames, Route: cfg.Gateway.RouteShortNames, Domain: cfg.Gateway.ClusterDomain}}
}

func positive[T ~int64](d T) T {
	if d < 0 {
		return 0
	}
	return d
}

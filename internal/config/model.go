package config

import (
	"crypto/x509"
	"log/slog"
	"net/netip"
	"time"

	"egret.io/egret/internal/limit"

	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

// Role selects listener and drain defaults.
type Role string

// Roles.
const (
	RoleSidecar Role = "sidecar"
	RoleGateway Role = "gateway"
)

// DefaultPool is the pool routes use when they name none, and the one that
// UPSTREAM_PROXY and the other upstream variables fill.
const DefaultPool = "default"

// Defaults per role.
const (
	SidecarListen       = "127.0.0.1:3128"
	SidecarAdminListen  = "127.0.0.1:9901"
	GatewayListen       = ":3128"
	GatewayAdminListen  = ":9901"
	SidecarDrainPeriod  = 2 * time.Second
	GatewayDrainPeriod  = 5 * time.Second
	DefaultDrainTimeout = 25 * time.Second
	// The gateway's per-client limits: a shared proxy must not let one
	// client hold every descriptor.
	DefaultClientMaxConcurrent  = 256
	DefaultClientMaxConnections = 512
	// DefaultResponseHeaderTimeout bounds the wait for the response header
	// of a forwarded request (nginx's proxy_read_timeout is the same).
	DefaultResponseHeaderTimeout = 60 * time.Second
)

// Proxy is the validated configuration of egret proxy. It is immutable.
type Proxy struct {
	Role              Role
	Listen            string
	AdminListen       string // "" when disabled
	TransparentListen string // "" when disabled
	SOCKSListen       string // "" when disabled
	Via               string // "" = host name

	// SOCKSAuth is what SOCKS5 clients must present; nil means no
	// authentication.
	SOCKSAuth *SOCKSAuth

	// Rules in order: explicit routes, deny shorthand, direct shorthand,
	// then the proxy's own NO_PROXY entries.
	Rules       []route.Rule
	Default     route.Action
	DefaultPool string // pool of the default route when it is Upstream
	// Pools maps a pool name to its members (from the config, the
	// environment and, at load time, its member file).
	Pools map[string][]*upstream.Member
	// PoolOptions holds each pool's settings; every pool has an entry.
	PoolOptions map[string]PoolOptions
	// Credentials is the mounted Secret for members without their own.
	Credentials Credentials
	// Gateway is the client allow-list and the SSRF guard.
	Gateway Gateway
	// Limits protect destinations and the proxy.
	Limits Limits

	Resolver resolve.Config
	Timeouts Timeouts

	DrainPeriod  time.Duration
	DrainTimeout time.Duration

	LogLevel  slog.Level
	AccessLog bool
	// PProf serves Go's profiler under /debug/pprof/ on the admin listener.
	PProf bool
	// ReadyNeedsUpstream makes /readyz fail while a pool that routes use
	// has no member out of back-off (default: gateway yes, sidecar no).
	ReadyNeedsUpstream bool
	// AdminTokenFile holds the bearer token that opens the status page to
	// peers off loopback ("" = loopback peers only).
	AdminTokenFile string

	// Notes are non-fatal remarks to log at start (never secrets): an
	// upstream variable ignored because it points at egret itself, both
	// cases of a variable disagreeing, ...
	Notes []string
}

// Timeouts mirror proxy.Timeouts; a negative value disables one.
type Timeouts struct {
	Dial, UpstreamConnect, HeaderRead, ClientIdle, TunnelIdle, ResponseHeader time.Duration
}

// PoolOptions are a pool's settings besides its members.
type PoolOptions struct {
	Policy  upstream.Policy
	Backoff upstream.Backoff
	Probe   upstream.Probe // Target "" = no probes
	// MembersFile is re-read on change; its members join Static.
	MembersFile string
	// Static are the members from the config file and the environment.
	Static []*upstream.Member
	// RootCAs verifies https:// members (nil = system roots); ServerName
	// overrides the name verified.
	RootCAs    *x509.CertPool
	CAFile     string
	ServerName string
}

// Credentials locates the upstream credential files.
type Credentials struct {
	Dir           string // "" = none
	CheckInterval time.Duration
	// Required is set when the directory was configured explicitly (not
	// the default one found present): failing to read it is an error.
	Required bool
}

// Gateway is the hardening of a shared proxy.
type Gateway struct {
	ClientCIDRs []netip.Prefix
	SSRFGuard   bool
	AllowCIDRs  []netip.Prefix
}

// Limits protect destinations and the proxy; zero values mean none.
type Limits struct {
	MaxTunnels           int
	ClientMaxConcurrent  int
	ClientMaxConnections int
	PerDestination       limit.Limit
	Destinations         []limit.Rule
	Breaker              limit.BreakerConfig // Failures 0 = no breaker
}

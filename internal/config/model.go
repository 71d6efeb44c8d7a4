package config

import (
	"crypto/x509"
	"log/slog"
	"net/netip"
	"time"

	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/proxy"

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

// Proxy is the validated configuration of egret proxy: plain values
// (addresses, rules, member specs, durations), none of the live objects
// the process builds from them (internal/proxyd). It is immutable.
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
	// Pools are the upstream pools by name; "default" is DefaultPool.
	Pools map[string]Pool
	// Credentials is the mounted Secret for members without their own.
	Credentials Credentials
	// Gateway is the client allow-list and the SSRF guard.
	Gateway Gateway
	// Limits protect destinations and the proxy.
	Limits Limits
	// Policy is per-workload egress at the gateway (policy.go).
	Policy Policy
	// Intercept is TLS interception at the gateway (intercept.go); nil
	// when off.
	Intercept *Intercept

	Resolver resolve.Config
	// Timeouts are the proxy's own (proxy.Timeouts: zero takes the
	// default, a negative value disables one).
	Timeouts proxy.Timeouts

	DrainPeriod  time.Duration
	DrainTimeout time.Duration

	LogLevel slog.Level
	// LogFormat is the encoding of the process's log lines, client-go's
	// included: "json" (default) or "text". The access log is JSON either way.
	LogFormat string
	AccessLog bool
	// PProf serves Go's profiler under /debug/pprof/ on the admin listener.
	PProf bool
	// ReadyNeedsUpstream makes /readyz fail while a pool that routes use
	// has no member out of back-off (default: gateway yes, sidecar no).
	ReadyNeedsUpstream bool
	// AdminTokenFile holds the bearer token that opens the status page to
	// peers off loopback ("" = loopback peers only).
	AdminTokenFile string
	// TrustDir and TrustDigest, when set, name the CA bundle the webhook
	// mounted and the digest it verified at admission: the process checks
	// them at start (trust.VerifyDir) and refuses to run on another bundle.
	TrustDir, TrustDigest string

	// EnvDir is the settings directory (EGRET_ENV_DIR) the configuration
	// was read with, "" when none: a change there calls for a reload.
	EnvDir string

	// Notes are non-fatal remarks to log at start (never secrets): an
	// upstream variable ignored because it points at egret itself, both
	// cases of a variable disagreeing, ...
	Notes []string
}

// Pool is one upstream pool as configured.
type Pool struct {
	// Members are the pool's members: Static, then those of MembersFile
	// as it was when the configuration was loaded.
	Members []upstream.MemberSpec
	// Static are the members from the config file and the environment: a
	// change of MembersFile replaces the others and keeps these.
	Static []upstream.MemberSpec
	// MembersFile is re-read on change ("" = none).
	MembersFile string

	Policy  upstream.Policy
	Backoff upstream.Backoff
	Probe   upstream.Probe // Target "" = no probes
	// RootCAs verifies https:// members (nil = system roots); ServerName
	// overrides the name verified.
	RootCAs    *x509.CertPool
	CAFile     string
	ServerName string
	// Namespaces may name the pool in their EgressPolicies ("*": all);
	// see PoolSpec.Namespaces.
	Namespaces []string
}

// Grants reports whether an EgressPolicy of namespace ns may name the
// pool.
func (p Pool) Grants(ns string) bool {
	for _, n := range p.Namespaces {
		if n == "*" || n == ns {
			return true
		}
	}
	return false
}

// Credentials locates the upstream credential files.
type Credentials struct {
	Dir           string // "" = none
	CheckInterval time.Duration
	// Required is set when the directory was configured explicitly (not
	// the default one found present): failing to read it is an error.
	Required bool
	// TokenFile holds a bearer token (the pod's projected service-account
	// token) presented instead of the directory's credentials, re-read on
	// change; "" = none.
	TokenFile string
}

// Gateway is the hardening of a shared proxy.
type Gateway struct {
	ClientCIDRs []netip.Prefix
	SSRFGuard   bool
	AllowCIDRs  []netip.Prefix
	// RouteShortNames routes a short name as the FQDN the calling pod's
	// resolver finds (EGRET_SHORT_NAMES=route); false refuses it.
	RouteShortNames bool
	// ResolveShortNames resolves short names with the gateway's own
	// resolver, as any name (EGRET_SHORT_NAMES=off).
	ResolveShortNames bool
	// ClusterDomain is the cluster DNS domain ("" = cluster.local).
	ClusterDomain string
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

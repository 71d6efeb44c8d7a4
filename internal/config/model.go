package config

import (
	"log/slog"
	"time"

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
	SidecarListen      = "127.0.0.1:3128"
	SidecarAdminListen = "127.0.0.1:9901"
	GatewayListen      = ":3128"
	GatewayAdminListen = ":9901"
	SidecarDrainPeriod = 2 * time.Second
	GatewayDrainPeriod = 5 * time.Second
	DefaultDrainTimout = 25 * time.Second
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
	// Pools maps a pool name to its members.
	Pools map[string][]*upstream.Member

	Resolver resolve.Config
	Timeouts Timeouts

	DrainPeriod  time.Duration
	DrainTimeout time.Duration

	LogLevel  slog.Level
	AccessLog bool

	// Notes are non-fatal remarks to log at start (never secrets): an
	// upstream variable ignored because it points at egret itself, both
	// cases of a variable disagreeing, ...
	Notes []string
}

// Timeouts mirror proxy.Timeouts; a negative value disables one.
type Timeouts struct {
	Dial, UpstreamConnect, HeaderRead, ClientIdle, TunnelIdle, ResponseHeader time.Duration
}

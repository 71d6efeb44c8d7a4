package config

// File is the YAML configuration file (version 1). Every field is optional.
// Durations are Go durations ("10s", "1m30s").
type File struct {
	Version     int    `json:"version,omitempty"`
	Role        string `json:"role,omitempty"`         // sidecar (default) or gateway
	Listen      string `json:"listen,omitempty"`       // explicit proxy listener
	AdminListen string `json:"admin_listen,omitempty"` // /healthz /readyz /metrics, status page
	// AdminTokenFile holds the bearer token that opens the status page,
	// status.json and pprof to peers off loopback (a mounted Secret).
	AdminTokenFile    string `json:"admin_token_file,omitempty"`
	TransparentListen string `json:"transparent_listen,omitempty"` // iptables-REDIRECTed TCP ("" = off)
	SOCKSListen       string `json:"socks_listen,omitempty"`       // SOCKS5 listener ("" = off)
	// Via is the name egret adds to Via headers and uses to detect loops;
	// default: the host name (the pod name in Kubernetes).
	Via string `json:"via,omitempty"`
	// DefaultRoute is direct, upstream, upstream:<pool> or deny; default:
	// upstream when the default pool has members, direct otherwise.
	DefaultRoute string `json:"default_route,omitempty"`
	// Routes are explicit rules, tried in order before the shorthands.
	Routes []RouteSpec `json:"routes,omitempty"`
	// Deny and Direct are shorthands: one deny rule and one direct rule,
	// tried after Routes (deny first).
	Deny   MatchSpec `json:"deny,omitempty"`
	Direct MatchSpec `json:"direct,omitempty"`
	// DenyReport is a report-only deny shorthand (dry run), tried right
	// after Deny: matches are logged as would_deny and routed on.
	DenyReport MatchSpec `json:"deny_report,omitempty"`
	// Pools are named upstream pools; "default" is the one routes use when
	// they name none, and the one UPSTREAM_PROXY and friends fill.
	Pools map[string]PoolSpec `json:"pools,omitempty"`
	// Credentials is the mounted Secret with the upstream user name and
	// password for members without their own.
	Credentials CredentialsSpec `json:"credentials,omitempty"`
	// Gateway is the hardening of a shared proxy: who may use it, and
	// which addresses it refuses to connect to.
	Gateway GatewaySpec `json:"gateway,omitempty"`
	// Limits protect destinations and the proxy.
	Limits   LimitsSpec   `json:"limits,omitempty"`
	Resolver ResolverSpec `json:"resolver,omitempty"`
	Timeouts TimeoutsSpec `json:"timeouts,omitempty"`
	Drain    DrainSpec    `json:"drain,omitempty"`
	Log      LogSpec      `json:"log,omitempty"`
	// Intercept is selective TLS interception at the gateway: the CA, the
	// sites, their credentials and method/path rules (docs/interception.md).
	Intercept InterceptSpec `json:"intercept,omitempty"`
}

// MatchSpec lists what a rule matches. Hosts are exact names (or IPs);
// suffixes follow NO_PROXY conventions: ".svc" matches names below svc,
// "example.com" matches example.com and names below it; CIDRs match IP
// literals and names resolving into them.
type MatchSpec struct {
	Hosts    []string `json:"hosts,omitempty"`
	Suffixes []string `json:"suffixes,omitempty"`
	CIDRs    []string `json:"cidrs,omitempty"`
	Ports    []int    `json:"ports,omitempty"`
}

// RouteSpec is one explicit rule.
type RouteSpec struct {
	Name string `json:"name,omitempty"`
	MatchSpec
	// Action is direct, upstream, upstream:<pool> or deny.
	Action string `json:"action"`
	// Report makes a deny rule report-only: it logs would_deny and the
	// request is routed by the following rules.
	Report bool `json:"report,omitempty"`
}

// ResolverSpec configures name resolution for routing and direct dials.
type ResolverSpec struct {
	Servers     []string            `json:"servers,omitempty"`      // "ip:port" DNS servers instead of the system's
	Hosts       map[string][]string `json:"hosts,omitempty"`        // static answers: name → addresses
	HostsFile   string              `json:"hosts_file,omitempty"`   // hosts(5) file with static answers
	TTL         string              `json:"ttl,omitempty"`          // for answers without a TTL (system resolver)
	NegativeTTL string              `json:"negative_ttl,omitempty"` // at most this long for a failure
	MinTTL      string              `json:"min_ttl,omitempty"`      // answers are kept at least this long
	MaxTTL      string              `json:"max_ttl,omitempty"`      // and at most this long
	StaleTTL    string              `json:"stale_ttl,omitempty"`    // an expired answer serves this long when a refresh fails ("0" = never)
}

// TimeoutsSpec bounds each stage; "0" disables one, empty takes the default.
type TimeoutsSpec struct {
	Dial            string `json:"dial,omitempty"`
	UpstreamConnect string `json:"upstream_connect,omitempty"`
	HeaderRead      string `json:"header_read,omitempty"`
	ClientIdle      string `json:"client_idle,omitempty"`
	TunnelIdle      string `json:"tunnel_idle,omitempty"`
	ResponseHeader  string `json:"response_header,omitempty"`
}

// DrainSpec is what SIGTERM does: keep serving (readiness already failing)
// for Period, then stop accepting and give open requests and tunnels until
// Timeout to finish.
type DrainSpec struct {
	Period  string `json:"period,omitempty"`
	Timeout string `json:"timeout,omitempty"`
}

// LogSpec configures logging (JSON lines on stderr).
type LogSpec struct {
	Level  string `json:"level,omitempty"`  // debug, info (default), warn, error
	Format string `json:"format,omitempty"` // json (default) or text
	Access *bool  `json:"access,omitempty"` // one line per request/tunnel (default true)
}

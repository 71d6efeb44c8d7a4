package config

// Key is a setting that can come from the environment or a flag. Flags are
// applied as if their key were set in the environment, after it.
type Key struct {
	Env     string   // the environment variable
	Aliases []string // other environment names read when Env is unset
	Flag    string   // the flag name ("" = environment only)
	Help    string
	// Type names the value in --help (duration, int, bool, addr, file,
	// cidrs...): every value is read as text, as from the environment, and
	// parsed by Load, so the flag itself cannot say what it takes.
	Type string
	// Bool marks a true/false setting: its flag may be given without a
	// value (--pprof means --pprof=true).
	Bool bool
}

// Keys lists every setting egret proxy reads from the environment or flags,
// in the order they are documented.
var Keys = []Key{
	{Env: "EGRET_ROLE", Flag: "role", Type: "sidecar|gateway", Help: "sidecar (default) or gateway: sets listener defaults"},
	{Env: "LISTEN_ADDR", Aliases: []string{"EGRET_LISTEN"}, Flag: "listen", Type: "addr", Help: "explicit proxy listener (sidecar 127.0.0.1:3128, gateway :3128)"},
	{Env: "ADMIN_LISTEN_ADDR", Aliases: []string{"EGRET_ADMIN_LISTEN"}, Flag: "admin-listen", Type: "addr", Help: "admin listener (sidecar 127.0.0.1:9901, gateway :9901); \"off\" disables it"},
	{Env: "TRANSPARENT_LISTEN_ADDR", Aliases: []string{"EGRET_TRANSPARENT_LISTEN"}, Flag: "transparent-listen", Type: "addr", Help: "transparent listener for iptables-REDIRECTed TCP (off unless set; usually 127.0.0.1:15001)"},
	{Env: "SOCKS_LISTEN_ADDR", Aliases: []string{"EGRET_SOCKS_LISTEN"}, Flag: "socks-listen", Type: "addr", Help: "SOCKS5 listener (off unless set)"},
	{Env: "SOCKS_USER", Help: "user name SOCKS5 clients must send (with SOCKS_PASS or SOCKS_PASS_FILE; unset: no authentication)"},
	{Env: "SOCKS_PASS", Help: "password SOCKS5 clients must send"},
	{Env: "SOCKS_PASS_FILE", Help: "file holding the SOCKS5 password (a mounted Secret), instead of SOCKS_PASS"},
	{Env: "DIRECT_HOSTS", Flag: "direct-hosts", Type: "hosts", Help: "comma-separated exact host names that go direct"},
	{Env: "DIRECT_SUFFIXES", Flag: "direct-suffixes", Type: "suffixes", Help: "comma-separated DNS suffixes that go direct (.svc = below svc; example.com = itself and below)"},
	{Env: "DIRECT_CIDRS", Flag: "direct-cidrs", Type: "cidrs", Help: "comma-separated CIDRs that go direct (IP literals, and names resolving into them)"},
	{Env: "DENY_HOSTS", Flag: "deny-hosts", Type: "hosts", Help: "comma-separated exact host names that are refused (403)"},
	{Env: "DENY_SUFFIXES", Flag: "deny-suffixes", Type: "suffixes", Help: "comma-separated DNS suffixes that are refused (403)"},
	{Env: "DENY_CIDRS", Flag: "deny-cidrs", Type: "cidrs", Help: "comma-separated CIDRs that are refused (403)"},
	{Env: "DENY_REPORT_HOSTS", Flag: "deny-report-hosts", Type: "hosts", Help: "like DENY_HOSTS, report-only: logged as would_deny, not refused (dry run)"},
	{Env: "DENY_REPORT_SUFFIXES", Flag: "deny-report-suffixes", Type: "suffixes", Help: "like DENY_SUFFIXES, report-only (would_deny)"},
	{Env: "DENY_REPORT_CIDRS", Flag: "deny-report-cidrs", Type: "cidrs", Help: "like DENY_CIDRS, report-only (would_deny)"},
	{Env: "DEFAULT_ROUTE", Flag: "default-route", Type: "route", Help: "direct, upstream, upstream:<pool> or deny (default: upstream when an upstream is configured, else direct)"},
	{Env: "UPSTREAM_PROXY", Flag: "upstream", Type: "urls", Help: "comma-separated upstream proxy URLs = the default pool (the flag refuses credentials: use the environment)"},
	{Env: "PROXY_HOST", Help: "upstream proxy host or host:port (with PROXY_PORT, PROXY_SCHEME, PROXY_USER, PROXY_PASS)"},
	{Env: "PROXY_PORT", Help: "port for PROXY_HOST (default 3128)"},
	{Env: "PROXY_SCHEME", Help: "scheme for PROXY_HOST: http (default), https or socks5"},
	{Env: "PROXY_USER", Help: "user name for upstream members given without credentials"},
	{Env: "PROXY_PASS", Help: "password for upstream members given without credentials"},
	{Env: "EGRET_ENV_DIR", Flag: "env-dir", Type: "dir", Help: "directory of files named after these variables (a mounted Secret or ConfigMap, e.g. the key UPSTREAM_PROXY), read as if set in the environment — a variable set in the environment wins — and watched: a change reloads routes, rules and pools"},
	{Env: "PROXY_CREDENTIALS_DIR", Flag: "credentials-dir", Type: "dir", Help: "directory with username and password files (a mounted Secret; for auth=negotiate members a keytab may stand in for the password, beside a krb5.conf) for members without credentials, re-read on change (default /var/run/secrets/proxy when present)"},
	{Env: "EGRET_CREDENTIALS_CHECK_INTERVAL", Flag: "credentials-check-interval", Type: "duration", Help: "safety-net re-read of the credential and member files (default 10s)"},
	{Env: "EGRET_UPSTREAM_TOKEN_FILE", Flag: "upstream-token-file", Type: "file", Help: "file with the pod's projected service-account token (audience egret), sent as Proxy-Authorization: Bearer to the default pool's members without credentials — the gateway, which then knows the pod — only over https:// or to a Service name or private address, and re-read on change"},
	{Env: "EGRET_UPSTREAM_FILE", Flag: "upstream-file", Type: "file", Help: "file of default-pool members, one URL [weight=N] [backup] [auth=basic|ntlm|negotiate] [spn=HTTP/host] per line, re-read on change"},
	{Env: "EGRET_UPSTREAM_POLICY", Flag: "upstream-policy", Type: "policy", Help: "default pool's member selection: round_robin (default), random, least_conn or sticky"},
	{Env: "EGRET_UPSTREAM_CA_FILE", Flag: "upstream-ca-file", Type: "file", Help: "PEM CAs to verify the default pool's https:// members (default: system roots)"},
	{Env: "EGRET_UPSTREAM_PROBE", Flag: "upstream-probe", Type: "host:port", Help: "host:port to CONNECT to through each default-pool member as a health probe (off unless set)"},
	{Env: "EGRET_UPSTREAM_PROBE_INTERVAL", Flag: "upstream-probe-interval", Type: "duration", Help: "default pool's probe interval (default 10s)"},
	{Env: "EGRET_VIA", Flag: "via", Type: "name", Help: "name in Via headers and for loop detection (default: host name)"},
	{Env: "EGRET_HOSTS_FILE", Flag: "hosts-file", Type: "file", Help: "hosts(5) file of static name → address answers"},
	{Env: "EGRET_DNS_SERVERS", Flag: "dns-servers", Type: "addrs", Help: "comma-separated ip:port DNS servers instead of the system's"},
	{Env: "EGRET_CLIENT_CIDRS", Flag: "client-cidrs", Type: "cidrs", Help: "comma-separated CIDRs of the clients allowed to use the proxy (default: any)"},
	{Env: "EGRET_SSRF_GUARD", Flag: "ssrf-guard", Type: "bool", Help: "refuse to connect to any destination address that is not global unicast — private, loopback, link-local/metadata, CGNAT, ULA, multicast, reserved, IPv6 forms embedding them — and to the proxy's own addresses (default true for the gateway role)", Bool: true},
	{Env: "EGRET_SSRF_ALLOW_CIDRS", Flag: "ssrf-allow-cidrs", Type: "cidrs", Help: "comma-separated CIDRs the SSRF guard lets through (the CIDRs of DIRECT_CIDRS are let through too, for the destinations their rule decides)"},
	{Env: "EGRET_SHORT_NAMES", Flag: "short-names", Type: "refuse|route|off", Help: "gateway: a single-label or name.namespace destination (http://payments:8080) names a cluster Service only the calling pod's resolver expands — refuse (default: 502 naming the fix), route it as the FQDN the pod's search path finds (needs EGRET_POLICY to know the pod's namespace; the SSRF guard still judges its addresses), or off (resolve it with the gateway's own resolver, as before)"},
	{Env: "EGRET_CLUSTER_DOMAIN", Flag: "cluster-domain", Type: "domain", Help: "the cluster DNS domain short names expand under (default cluster.local)"},
	{Env: "EGRET_POLICY", Flag: "policy", Type: "bool", Help: "per-workload egress: identify clients by pod (address or service-account token) and apply their EgressPolicy (true/false, default false; see docs/policy.md)", Bool: true},
	{Env: "EGRET_POLICY_KUBECONFIG", Flag: "policy-kubeconfig", Type: "file", Help: "kubeconfig for watching pods and policies and reviewing tokens (default: in-cluster)"},
	{Env: "EGRET_TOKEN_AUDIENCE", Flag: "token-audience", Type: "audience", Help: "audience clients' service-account tokens must have (default egret)"},
	{Env: "EGRET_RATELIMIT_SERVICE", Flag: "ratelimit-service", Type: "host:port", Help: "host:port of an Envoy rate-limit service (gRPC envoy.service.ratelimit.v3) that holds workload rate limits across gateway replicas (default: local token buckets)"},
	{Env: "EGRET_RATELIMIT_DOMAIN", Flag: "ratelimit-domain", Type: "domain", Help: "the rate-limit service's domain (default egret)"},
	{Env: "EGRET_RATELIMIT_FAILURE_MODE", Flag: "ratelimit-failure-mode", Type: "open|closed", Help: "when the rate-limit service does not answer: open (let through, default) or closed (refuse, 503)"},
	{Env: "EGRET_RATELIMIT_TIMEOUT", Flag: "ratelimit-timeout", Type: "duration", Help: "wait for the rate-limit service's answer (default 250ms)"},
	{Env: "EGRET_MAX_TUNNELS", Flag: "max-tunnels", Type: "int", Help: "most tunnels open at once (default: no limit)"},
	{Env: "EGRET_CLIENT_MAX_CONCURRENT", Flag: "client-max-concurrent", Type: "int", Help: "most requests and tunnels in flight per client address (gateway 256, sidecar no limit; 0 = no limit)"},
	{Env: "EGRET_CLIENT_MAX_CONNECTIONS", Flag: "client-max-connections", Type: "int", Help: "most connections open per client address, idle ones included; more are refused as they arrive (gateway 512, sidecar no limit; 0 = no limit)"},
	{Env: "EGRET_DEST_RATE", Flag: "dest-rate", Type: "rate", Help: "new requests and tunnels per second per destination host (default: no limit)"},
	{Env: "EGRET_DEST_BURST", Flag: "dest-burst", Type: "int", Help: "burst above EGRET_DEST_RATE (default: the rate)"},
	{Env: "EGRET_DEST_MAX_CONCURRENT", Flag: "dest-max-concurrent", Type: "int", Help: "most requests and tunnels in flight per destination host (default: no limit)"},
	{Env: "EGRET_BREAKER_FAILURES", Flag: "breaker-failures", Type: "int", Help: "consecutive connection failures that open a destination's circuit breaker (default: no breaker)"},
	{Env: "EGRET_BREAKER_OPEN_FOR", Flag: "breaker-open-for", Type: "duration", Help: "how long an open breaker fails requests before a trial (default 30s, doubling to 5m)"},
	{Env: "EGRET_DIAL_TIMEOUT", Flag: "dial-timeout", Type: "duration", Help: "direct connect timeout (default 10s)"},
	{Env: "EGRET_UPSTREAM_CONNECT_TIMEOUT", Flag: "upstream-connect-timeout", Type: "duration", Help: "dial + CONNECT answer through one upstream member (default 15s)"},
	{Env: "EGRET_HEADER_READ_TIMEOUT", Flag: "header-read-timeout", Type: "duration", Help: "time a client has to send its request header (default 10s)"},
	{Env: "EGRET_CLIENT_IDLE_TIMEOUT", Flag: "client-idle-timeout", Type: "duration", Help: "idle keep-alive client connection (default 2m)"},
	{Env: "EGRET_RESPONSE_HEADER_TIMEOUT", Flag: "response-header-timeout", Type: "duration", Help: "wait for a forwarded request's response header (default 60s; 0 = none)"},
	{Env: "EGRET_TUNNEL_IDLE_TIMEOUT", Flag: "tunnel-idle-timeout", Type: "duration", Help: "tunnel with no traffic either way (default 1h)"},
	{Env: "EGRET_DRAIN_PERIOD", Flag: "drain-period", Type: "duration", Help: "after SIGTERM, keep accepting this long with readiness failing (sidecar 2s, gateway 5s)"},
	{Env: "EGRET_DRAIN_TIMEOUT", Flag: "drain-timeout", Type: "duration", Help: "then wait this long for open requests and tunnels (default 25s)"},
	{Env: "EGRET_LOG_LEVEL", Flag: "log-level", Type: "level", Help: "debug, info, warn or error"},
	{Env: "EGRET_LOG_FORMAT", Flag: "log-format", Type: "format", Help: "json (default) or text: the encoding of the log lines, client-go's included (the access log stays JSON)"},
	{Env: "EGRET_READY_NEEDS_UPSTREAM", Flag: "ready-needs-upstream", Type: "bool", Help: "/readyz fails while a pool that routes use has every member down (default true for the gateway, false for a sidecar: an egress outage must not take the app's pod out of its Service)", Bool: true},
	{Env: "EGRET_TRUST_DIR", Flag: "trust-dir", Type: "dir", Help: "directory of the CA bundle egret's webhook mounted (ca-bundle.pem and truststore.p12); with EGRET_TRUST_DIGEST, checked at start"},
	{Env: "EGRET_TRUST_DIGEST", Flag: "trust-digest", Type: "digest", Help: "digest of the CA bundle the webhook verified at admission: the proxy refuses to start when EGRET_TRUST_DIR holds another (a bundle egret did not write)"},
	{Env: "EGRET_ADMIN_TOKEN_FILE", Flag: "admin-token-file", Type: "file", Help: "file with the bearer token that opens the status page, status.json and pprof to peers off loopback (default: loopback peers only)"},
	{Env: "EGRET_PPROF", Flag: "pprof", Type: "bool", Help: "serve Go's profiler under /debug/pprof/ on the admin listener (true/false, default false)", Bool: true},
	{Env: "EGRET_ACCESS_LOG", Flag: "access-log", Type: "bool", Help: "one JSON line per request and tunnel (true/false, default true)", Bool: true},
}

// Lookup reads a setting: flags first, then the environment.
type Lookup func(key string) (string, bool)

package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/ipaddr"
	"egret.io/egret/internal/noproxy"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

// Sources are the inputs of Load.
type Sources struct {
	// File is the path of the YAML configuration file; "" means none.
	File string
	// Env looks environment variables up; nil means os.LookupEnv.
	Env func(string) (string, bool)
	// Flags holds the flags the user set, keyed by their Key.Env name.
	Flags map[string]string
	// ReadFile reads files (the config and hosts files); nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// DefaultCredentialsDir replaces credentials.DefaultDir, which is used
	// when it holds a username file and no directory is configured; "-"
	// turns the default off (tests).
	DefaultCredentialsDir string
}

// Load reads, merges and validates the configuration.
func Load(src Sources) (*Proxy, error) {
	if src.Env == nil {
		src.Env = os.LookupEnv
	}
	if src.ReadFile == nil {
		src.ReadFile = os.ReadFile
	}
	envDirPath, envNotes, err := layerEnvDir(&src)
	if err != nil {
		return nil, err
	}
	f := &File{}
	var pos positions
	var parse Problems
	if src.File != "" {
		data, err := src.ReadFile(src.File)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		f, pos, err = parseFile(src.File, data)
		if err != nil && !errors.As(err, &parse) || f == nil {
			return nil, err
		}
	}
	p, err := compile(f, src)
	if err != nil || len(parse) > 0 {
		// Every problem at once: the file's and those of its values.
		return nil, locate(err, parse, src.File, pos)
	}
	p.EnvDir = envDirPath
	p.Notes = append(envNotes, p.Notes...)
	return p, nil
}

// layerEnvDir puts the settings directory, when one is set, under src.Env.
func layerEnvDir(src *Sources) (string, []string, error) {
	path, ok := src.Flags[EnvDirKey]
	if !ok {
		path, _ = src.Env(EnvDirKey)
	}
	if path = strings.TrimSpace(path); path == "" {
		return "", nil, nil
	}
	d, err := readEnvDir(path, src.ReadFile)
	if err != nil {
		return "", nil, err
	}
	var notes []string
	src.Env, notes = d.layer(src.Env)
	return path, notes, nil
}

// ParseFile decodes a YAML configuration strictly. Its error is Problems:
// every unknown key (with a did-you-mean) and every value of the wrong type,
// each with its line, column and key path.
func ParseFile(data []byte) (*File, error) {
	f, _, err := parseFile("", data)
	return f, err
}

// yamlStrict is the decoder: YAML to JSON to File, unknown fields refused.
func yamlStrict(data []byte, f *File) error { return yaml.UnmarshalStrict(data, f) }

// yamlLenient decodes what it can, skipping unknown keys and values of the
// wrong type.
func yamlLenient(data []byte, f *File) error { return yaml.Unmarshal(data, f) }

type loader struct {
	src   Sources
	notes []string
}

// get reads a key: a flag the user set wins over the environment; the
// first non-empty of the key's environment names is used.
func (l *loader) get(k string) (string, bool) {
	if v, ok := l.src.Flags[k]; ok {
		return v, true
	}
	if v, ok := l.src.Env(k); ok && v != "" {
		return v, true
	}
	for _, key := range Keys {
		if key.Env == k {
			for _, a := range key.Aliases {
				if v, ok := l.src.Env(a); ok && v != "" {
					return v, true
				}
			}
		}
	}
	return "", false
}

func (l *loader) env(k string) string {
	v, _ := l.src.Env(k)
	return v
}

func (l *loader) note(format string, args ...any) {
	l.notes = append(l.notes, fmt.Sprintf(format, args...))
}

func compile(f *File, src Sources) (*Proxy, error) {
	l := &loader{src: src}
	p := &Proxy{Pools: map[string]Pool{}}
	var errs []error
	bad := func(err error) { errs = append(errs, err) }
	// Each section reads its part of the file, the environment and the
	// flags, as CoreDNS plugins parse their own blocks; a section may use
	// what an earlier one settled (the role, the pools).
	l.listeners(f, p, bad)
	l.pools(f, p, bad)
	l.routes(f, p, bad)
	l.defaultRoute(f, p, bad)
	var err error
	if p.Resolver, err = l.resolver(f.Resolver); err != nil {
		bad(err)
	}
	l.gateway(f, p, bad)
	l.limits(f, p, bad)
	l.policy(p, bad)
	l.intercept(f, p, bad)
	l.timeouts(f, p, bad)
	l.logging(f, p, bad)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p.Notes = l.notes
	return p, nil
}

// listeners reads the role and the listener addresses (whose defaults
// follow the role), the Via name and the SOCKS5 authentication.
func (l *loader) listeners(f *File, p *Proxy, bad func(error)) {
	role := f.Role
	if v, ok := l.get("EGRET_ROLE"); ok {
		role = v
	}
	switch Role(strings.ToLower(role)) {
	case "", RoleSidecar:
		p.Role = RoleSidecar
	case RoleGateway:
		p.Role = RoleGateway
	default:
		bad(l.at("role", "EGRET_ROLE", fmt.Errorf("role %q: want sidecar or gateway", role)))
	}
	listen, admin := SidecarListen, SidecarAdminListen
	if p.Role == RoleGateway {
		listen, admin = GatewayListen, GatewayAdminListen
	}
	p.Listen = l.str("LISTEN_ADDR", f.Listen, listen)
	p.AdminListen = l.str("ADMIN_LISTEN_ADDR", f.AdminListen, admin)
	p.TransparentListen = l.str("TRANSPARENT_LISTEN_ADDR", f.TransparentListen, "")
	p.SOCKSListen = l.str("SOCKS_LISTEN_ADDR", f.SOCKSListen, "")
	for _, a := range []struct {
		name, key, env string
		v              *string
	}{{"listen", "listen", "LISTEN_ADDR", &p.Listen}, {"admin listen", "admin_listen", "ADMIN_LISTEN_ADDR", &p.AdminListen},
		{"transparent listen", "transparent_listen", "TRANSPARENT_LISTEN_ADDR", &p.TransparentListen}, {"socks listen", "socks_listen", "SOCKS_LISTEN_ADDR", &p.SOCKSListen}} {
		if *a.v == "off" || *a.v == "none" {
			*a.v = ""
		}
		if *a.v == "" {
			continue
		}
		if err := checkListen(*a.v); err != nil {
			bad(l.at(a.key, a.env, fmt.Errorf("%s address: %w", a.name, err)))
		}
	}
	if p.Listen == "" {
		bad(errors.New("listen address: the proxy needs a listener"))
	}
	p.Via = l.str("EGRET_VIA", f.Via, "")
	if auth, err := l.socksAuth(p.SOCKSListen); err != nil {
		bad(err)
	} else {
		p.SOCKSAuth = auth
	}
}

// pools reads the pools' members — the config file's, then the default
// pool's from the environment (--upstream, UPSTREAM_PROXY, PROXY_HOST,
// HTTPS_PROXY...) — the credentials that apply to them, and each pool's
// options and member file. A member that is egret's own listener is
// dropped with a note.
func (l *loader) pools(f *File, p *Proxy, bad func(error)) {
	static := map[string][]upstream.MemberSpec{}
	for name, ps := range f.Pools {
		if name == "" {
			bad(errors.New("pools: a pool needs a name"))
			continue
		}
		ms, err := memberSpecs(ps.Members, "pools."+name)
		if err != nil {
			bad(err)
		}
		static[name] = ms
	}
	if ms, err := l.defaultPoolFromEnv(); err != nil {
		bad(err)
	} else if ms != nil {
		static[DefaultPool] = ms
	}
	user, hasUser := l.src.Env("PROXY_USER")
	pass, hasPass := l.src.Env("PROXY_PASS")
	l.credentials(f, p, bad)
	l.upstreamToken(p, bad)
	if p.Credentials.Dir != "" || p.Credentials.TokenFile != "" {
		// The mounted Secret is the pools' shared, rotating credential.
		hasUser, hasPass = false, false
	}
	for name, ms := range static {
		kept := ms[:0]
		for _, m := range ms {
			if l.pointsAtSelf(m, p) {
				l.note("upstream %s in pool %s ignored: it is egret's own listener", m.Name(), name)
				continue
			}
			if !m.OwnAuth && (hasUser || hasPass) {
				m.User, m.Password, m.OwnAuth = user, pass, true
			}
			kept = append(kept, m)
		}
		static[name] = kept
	}
	l.poolOptions(f, p, static, bad)
}

// routes reads the rules in order: explicit routes, the deny, report-only
// deny and direct shorthands, then egret's own NO_PROXY.
func (l *loader) routes(f *File, p *Proxy, bad func(error)) {
	for i, rs := range f.Routes {
		src := fmt.Sprintf("config routes[%d]", i)
		if rs.Name != "" {
			src = fmt.Sprintf("config route %q", rs.Name)
		}
		key := fmt.Sprintf("routes[%d]", i)
		act, pool, err := route.ParseAction(rs.Action)
		if err != nil {
			bad(atKey(key+".action", fmt.Errorf("%s: %w", src, err)))
			continue
		}
		m, err := compileMatch(rs.MatchSpec)
		if err != nil {
			bad(atKey(key, fmt.Errorf("%s: %w", src, err)))
			continue
		}
		if rs.Report && act != route.Deny {
			bad(atKey(key+".report", fmt.Errorf("%s: report applies to deny rules only", src)))
			continue
		}
		p.Rules = append(p.Rules, route.Rule{Match: m, Action: act, Pool: pool, Source: src, Report: rs.Report})
	}
	for _, sh := range []struct {
		action route.Action
		spec   MatchSpec
		prefix string
		report bool
	}{{route.Deny, f.Deny, "DENY", false}, {route.Deny, f.DenyReport, "DENY_REPORT", true}, {route.Direct, f.Direct, "DIRECT", false}} {
		spec, src := sh.spec, "config "+strings.ToLower(sh.prefix)
		var from []string
		for _, kind := range []struct {
			key  string
			list *[]string
		}{{"_HOSTS", &spec.Hosts}, {"_SUFFIXES", &spec.Suffixes}, {"_CIDRS", &spec.CIDRs}} {
			if v, ok := l.get(sh.prefix + kind.key); ok {
				*kind.list = splitList(v)
				from = append(from, sh.prefix+kind.key)
			}
		}
		if len(from) > 0 {
			src = "env " + strings.Join(from, "+")
		}
		if len(spec.Hosts)+len(spec.Suffixes)+len(spec.CIDRs) == 0 {
			continue
		}
		m, err := compileMatch(spec)
		if err != nil {
			bad(fmt.Errorf("%s: %w", src, err))
			continue
		}
		p.Rules = append(p.Rules, route.Rule{Match: m, Action: sh.action, Source: src, Report: sh.report})
	}
	rules, err := l.noProxyRules()
	if err != nil {
		bad(err)
	}
	p.Rules = append(p.Rules, rules...)
}

// defaultRoute reads the default route — upstream when the default pool
// has members, direct otherwise, unless DEFAULT_ROUTE says — and checks
// that every pool a route names has members: an upstream route without a
// pool would otherwise fail every request.
func (l *loader) defaultRoute(f *File, p *Proxy, bad func(error)) {
	def := f.DefaultRoute
	if v, ok := l.get("DEFAULT_ROUTE"); ok {
		def = v
	}
	if def == "" {
		p.Default = route.Direct
		if len(p.Pools[DefaultPool].Members) > 0 {
			p.Default, p.DefaultPool = route.Upstream, DefaultPool
		}
	} else if act, pool, err := route.ParseAction(def); err != nil {
		bad(l.at("default_route", "DEFAULT_ROUTE", fmt.Errorf("default route: %w", err)))
	} else {
		p.Default, p.DefaultPool = act, pool
		if act == route.Upstream && pool == "" {
			p.DefaultPool = DefaultPool
		}
	}
	need := map[string]string{}
	if p.Default == route.Upstream {
		need[p.DefaultPool] = "the default route"
	}
	for _, r := range p.Rules {
		if r.Action == route.Upstream {
			name := r.Pool
			if name == "" {
				name = DefaultPool
			}
			need[name] = r.Source
		}
	}
	for name, who := range need {
		if pl := p.Pools[name]; len(pl.Members) == 0 && pl.MembersFile == "" {
			hint := ""
			if name == DefaultPool {
				hint = " (set UPSTREAM_PROXY, PROXY_HOST or HTTPS_PROXY, or pools.default.members)"
			}
			bad(fmt.Errorf("%s sends traffic upstream, but pool %q has no members%s", who, name, hint))
		}
	}
}

// timeouts reads the proxy's timeouts and the drain; zero disables one.
func (l *loader) timeouts(f *File, p *Proxy, bad func(error)) {
	drainPeriod := SidecarDrainPeriod
	if p.Role == RoleGateway {
		drainPeriod = GatewayDrainPeriod
	}
	durs := []struct {
		key, file string
		def       time.Duration
		out       *time.Duration
	}{
		{"EGRET_DIAL_TIMEOUT", f.Timeouts.Dial, 0, &p.Timeouts.Dial},
		{"EGRET_UPSTREAM_CONNECT_TIMEOUT", f.Timeouts.UpstreamConnect, 0, &p.Timeouts.UpstreamConnect},
		{"EGRET_HEADER_READ_TIMEOUT", f.Timeouts.HeaderRead, 0, &p.Timeouts.HeaderRead},
		{"EGRET_CLIENT_IDLE_TIMEOUT", f.Timeouts.ClientIdle, 0, &p.Timeouts.ClientIdle},
		{"EGRET_TUNNEL_IDLE_TIMEOUT", f.Timeouts.TunnelIdle, 0, &p.Timeouts.TunnelIdle},
		{"EGRET_RESPONSE_HEADER_TIMEOUT", f.Timeouts.ResponseHeader, DefaultResponseHeaderTimeout, &p.Timeouts.ResponseHeader},
		{"EGRET_DRAIN_PERIOD", f.Drain.Period, drainPeriod, &p.DrainPeriod},
		{"EGRET_DRAIN_TIMEOUT", f.Drain.Timeout, DefaultDrainTimeout, &p.DrainTimeout},
	}
	for _, d := range durs {
		v := d.file
		name := "config " + strings.ToLower(strings.TrimPrefix(d.key, "EGRET_"))
		fromFile := true
		if d.key != "" {
			if ev, ok := l.get(d.key); ok {
				v, name, fromFile = ev, d.key, false
			}
		}
		*d.out = d.def
		if v == "" {
			continue
		}
		dur, err := time.ParseDuration(v)
		if err != nil || dur < 0 {
			err := fmt.Errorf("%s: %q is not a duration like 10s or 1m30s", name, v)
			if fromFile {
				err = atKey(durationKeys[d.key], err)
			}
			bad(err)
			continue
		}
		if dur == 0 {
			dur = -1 // zero disables
		}
		*d.out = dur
	}
	if p.DrainPeriod < 0 {
		p.DrainPeriod = 0
	}
	if p.DrainTimeout < 0 {
		p.DrainTimeout = 0
	}
}

// logging reads the log level and the access log, and the admin
// listener's switches.
func (l *loader) logging(f *File, p *Proxy, bad func(error)) {
	level := f.Log.Level
	if v, ok := l.get("EGRET_LOG_LEVEL"); ok {
		level = v
	}
	if level != "" {
		if err := p.LogLevel.UnmarshalText([]byte(level)); err != nil {
			bad(l.at("log.level", "EGRET_LOG_LEVEL", fmt.Errorf("log level %q: want debug, info, warn or error", level)))
		}
	}
	p.LogFormat = strings.ToLower(l.str("EGRET_LOG_FORMAT", f.Log.Format, "json"))
	if p.LogFormat != "json" && p.LogFormat != "text" {
		bad(l.at("log.format", "EGRET_LOG_FORMAT", fmt.Errorf("log format %q: want json or text", p.LogFormat)))
	}
	p.AccessLog = true
	if f.Log.Access != nil {
		p.AccessLog = *f.Log.Access
	}
	p.AccessLog = l.boolean("EGRET_ACCESS_LOG", p.AccessLog, bad)
	p.ReadyNeedsUpstream = l.boolean("EGRET_READY_NEEDS_UPSTREAM", p.Role == RoleGateway, bad)
	p.PProf = l.boolean("EGRET_PPROF", false, bad)
	p.AdminTokenFile = l.str("EGRET_ADMIN_TOKEN_FILE", f.AdminTokenFile, "")
	p.TrustDir, p.TrustDigest = l.str("EGRET_TRUST_DIR", "", ""), strings.ToLower(l.str("EGRET_TRUST_DIGEST", "", ""))
	switch {
	case (p.TrustDir == "") != (p.TrustDigest == ""):
		bad(errors.New("EGRET_TRUST_DIR and EGRET_TRUST_DIGEST go together: set both (the webhook does) or neither"))
	case p.TrustDigest != "" && !isSHA256Hex(p.TrustDigest):
		bad(fmt.Errorf("EGRET_TRUST_DIGEST %q: want 64 hex digits (a SHA-256)", p.TrustDigest))
	}
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// durationKeys are the file keys of the durations compile reads, by their
// environment name ("" is timeouts.response_header, which has none).
var durationKeys = map[string]string{
	"EGRET_DIAL_TIMEOUT": "timeouts.dial", "EGRET_UPSTREAM_CONNECT_TIMEOUT": "timeouts.upstream_connect",
	"EGRET_HEADER_READ_TIMEOUT": "timeouts.header_read", "EGRET_CLIENT_IDLE_TIMEOUT": "timeouts.client_idle",
	"EGRET_TUNNEL_IDLE_TIMEOUT": "timeouts.tunnel_idle", "": "timeouts.response_header",
	"EGRET_DRAIN_PERIOD": "drain.period", "EGRET_DRAIN_TIMEOUT": "drain.timeout",
}

func (l *loader) str(key, file, def string) string {
	if v, ok := l.get(key); ok {
		return strings.TrimSpace(v)
	}
	if file != "" {
		return file
	}
	return def
}

func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port (e.g. 127.0.0.1:3128 or :3128)", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("%q: bad port", addr)
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: listen on an IP address, not a name", addr)
		}
	}
	return nil
}

// splitList splits a comma- or whitespace-separated list.
func splitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
}

func compileMatch(s MatchSpec) (route.Match, error) {
	var m route.Match
	var errs []error
	for _, h := range s.Hosts {
		if h == "*" {
			m.Any = true
			continue
		}
		m.Hosts = append(m.Hosts, strings.TrimSpace(h))
	}
	for _, v := range s.Suffixes {
		if strings.TrimSpace(v) == "*" {
			m.Any = true
			continue
		}
		sfx, err := route.ParseSuffix(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("suffix %q: %w", v, err))
			continue
		}
		m.Suffixes = append(m.Suffixes, sfx)
	}
	for _, v := range s.CIDRs {
		pfx, err := ipaddr.ParsePrefix(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("CIDR %w", err))
			continue
		}
		m.CIDRs = append(m.CIDRs, pfx)
	}
	for _, port := range s.Ports {
		if port < 1 || port > 65535 {
			errs = append(errs, fmt.Errorf("port %d: want 1-65535", port))
			continue
		}
		m.Ports = append(m.Ports, uint16(port))
	}
	if len(errs) > 0 {
		return m, errors.Join(errs...)
	}
	if !m.Any && len(m.Hosts)+len(m.Suffixes)+len(m.CIDRs)+len(m.Ports) == 0 {
		return m, errors.New("the rule matches nothing: give hosts, suffixes, cidrs or ports")
	}
	return m, nil
}

func parseMembers(raws []string, where string) ([]upstream.MemberSpec, error) {
	var out []upstream.MemberSpec
	var errs []error
	for _, r := range raws {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		m, err := upstream.ParseMemberSpec(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}

// splitMembers splits a comma-separated list of upstream URLs. A comma
// inside a password that was not percent-encoded (%2C) is kept where it
// is unambiguous: a piece with user information ("pa,ss@host") but no
// scheme belongs to the piece before it that has a scheme and no user
// information yet ("http://u:pa"), with every piece between.
func splitMembers(v string) []string {
	ps := strings.Split(v, ",")
	var out []string
	for i := 0; i < len(ps); i++ {
		p := ps[i]
		if k := strings.Index(p, "://"); k >= 0 && !strings.Contains(p[k:], "@") {
			// Does the user information go on past this comma?
			for j := i + 1; j < len(ps) && !strings.Contains(ps[j], "://"); j++ {
				if strings.Contains(ps[j], "@") {
					p, i = strings.Join(ps[i:j+1], ","), j
					break
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// defaultPoolFromEnv returns the default pool's members from the first
// upstream source that is set: --upstream, UPSTREAM_PROXY, PROXY_HOST,
// then the proxy's own HTTPS_PROXY/https_proxy/HTTP_PROXY/http_proxy.
// It returns nil when none is set.
func (l *loader) defaultPoolFromEnv() ([]upstream.MemberSpec, error) {
	if v, ok := l.src.Flags["UPSTREAM_PROXY"]; ok {
		for _, r := range splitMembers(v) {
			if strings.Contains(r, "@") {
				return nil, fmt.Errorf("--upstream %s: credentials on the command line are visible to every process (ps, /proc); set UPSTREAM_PROXY or PROXY_USER/PROXY_PASS in the environment instead", upstream.Redact(r))
			}
		}
		return parseMembers(splitMembers(v), "--upstream")
	}
	if v := l.env("UPSTREAM_PROXY"); strings.TrimSpace(v) != "" {
		return parseMembers(splitMembers(v), "UPSTREAM_PROXY")
	}
	if host := strings.TrimSpace(l.env("PROXY_HOST")); host != "" {
		scheme := strings.ToLower(strings.TrimSpace(l.env("PROXY_SCHEME")))
		if scheme == "" {
			scheme = "http"
		}
		if _, _, err := net.SplitHostPort(host); err != nil {
			port := strings.TrimSpace(l.env("PROXY_PORT"))
			if port == "" {
				port = "3128"
			}
			host = net.JoinHostPort(strings.Trim(host, "[]"), port)
		}
		return parseMembers([]string{scheme + "://" + host}, "PROXY_HOST")
	}
	var seen []string
	var names []string
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		v := strings.TrimSpace(l.env(k))
		if v == "" {
			continue
		}
		names = append(names, k)
		dup := false
		for _, s := range seen {
			dup = dup || s == v
		}
		if !dup {
			seen = append(seen, v)
		}
	}
	if len(seen) == 0 {
		return nil, nil
	}
	if len(seen) > 1 {
		l.note("the proxy variables %s hold %d different values; egret uses them all as one pool", strings.Join(names, ", "), len(seen))
	}
	return parseMembers(seen, strings.Join(names, "/"))
}

// pointsAtSelf reports whether m is egret's own explicit listener: a
// sidecar often inherits HTTP_PROXY=http://127.0.0.1:3128 meant for the app.
func (l *loader) pointsAtSelf(m upstream.MemberSpec, p *Proxy) bool {
	lh, lp, err := net.SplitHostPort(p.Listen)
	if err != nil {
		return false
	}
	mh, mp := m.URL.Hostname(), m.URL.Port()
	if mp != lp {
		return false
	}
	if strings.EqualFold(mh, lh) {
		return true
	}
	local := func(h string) bool {
		if h == "" || strings.EqualFold(h, "localhost") {
			return true
		}
		a, err := netip.ParseAddr(h)
		return err == nil && (a.IsLoopback() || a.IsUnspecified())
	}
	return local(mh) && local(lh)
}

// noProxyRules turns the proxy's own NO_PROXY (Go's rules: NO_PROXY wins
// over no_proxy) into direct rules: one for entries without a port, one per
// entry with a port.
func (l *loader) noProxyRules() ([]route.Rule, error) {
	upper, lower := l.env("NO_PROXY"), l.env("no_proxy")
	value, name := upper, "NO_PROXY"
	if strings.TrimSpace(value) == "" {
		value, name = lower, "no_proxy"
	} else if strings.TrimSpace(lower) != "" && lower != upper {
		l.note("NO_PROXY and no_proxy differ; egret follows Go and uses NO_PROXY")
	}
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	// An entry Go's rules never match is not an error: the value is
	// shared with the pod's other clients (a bracketed IPv6 address is
	// there for curl and Python). egret ignores it, as Go does, and says so.
	entries, perrs := noproxy.Parse(value)
	for _, e := range perrs {
		l.note("%s: %v (ignored, as Go ignores it)", name, e)
	}
	src := "env " + name
	var base route.Match
	var out []route.Rule
	for _, e := range entries {
		m := &base
		var own route.Match
		if e.Port != 0 {
			own.Ports = []uint16{e.Port}
			m = &own
		}
		switch e.Kind {
		case noproxy.KindAll:
			m.Any = true
		case noproxy.KindDomain:
			m.Suffixes = append(m.Suffixes, route.Suffix{Domain: e.Domain, Apex: e.Apex})
		case noproxy.KindIP, noproxy.KindCIDR:
			m.CIDRs = append(m.CIDRs, e.Prefix)
		}
		if e.Port != 0 {
			out = append(out, route.Rule{Match: own, Action: route.Direct, Source: src + " " + e.Raw})
		}
	}
	if base.Any || len(base.Suffixes)+len(base.CIDRs) > 0 {
		out = append([]route.Rule{{Match: base, Action: route.Direct, Source: src}}, out...)
	}
	return out, nil
}

func (l *loader) resolver(s ResolverSpec) (resolve.Config, error) {
	var c resolve.Config
	var errs []error
	hosts := map[string][]netip.Addr{}
	file := s.HostsFile
	if v, ok := l.get("EGRET_HOSTS_FILE"); ok {
		file = v
	}
	if file != "" {
		data, err := l.src.ReadFile(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("hosts file: %w", err))
		} else if h, err := resolve.ParseHosts(string(data)); err != nil {
			errs = append(errs, fmt.Errorf("hosts file %s: %w", file, err))
		} else {
			hosts = h
		}
	}
	names := make([]string, 0, len(s.Hosts))
	for n := range s.Hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		key := strings.ToLower(strings.TrimSuffix(n, "."))
		for _, a := range s.Hosts[n] {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				errs = append(errs, fmt.Errorf("resolver hosts %s: %q is not an IP address", n, a))
				continue
			}
			hosts[key] = append(hosts[key], ip.Unmap())
		}
	}
	if len(hosts) > 0 {
		c.Hosts = hosts
	}
	servers := s.Servers
	if v, ok := l.get("EGRET_DNS_SERVERS"); ok {
		servers = splitList(v)
	}
	for _, sv := range servers {
		if _, err := netip.ParseAddrPort(sv); err != nil {
			if a, aerr := netip.ParseAddr(sv); aerr == nil {
				sv = netip.AddrPortFrom(a, 53).String()
			} else {
				errs = append(errs, fmt.Errorf("DNS server %q: want ip or ip:port", sv))
				continue
			}
		}
		c.Servers = append(c.Servers, sv)
	}
	for _, d := range []struct {
		v   string
		out *time.Duration
		n   string
	}{{s.TTL, &c.TTL, "resolver ttl"}, {s.NegativeTTL, &c.NegativeTTL, "resolver negative_ttl"},
		{s.MinTTL, &c.MinTTL, "resolver min_ttl"}, {s.MaxTTL, &c.MaxTTL, "resolver max_ttl"}} {
		if d.v == "" {
			continue
		}
		dur, err := time.ParseDuration(d.v)
		if err != nil || dur <= 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive duration", d.n, d.v))
			continue
		}
		*d.out = dur
	}
	if v := strings.TrimSpace(s.StaleTTL); v != "" {
		if d, err := time.ParseDuration(v); err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("resolver stale_ttl: %q is not a duration", v))
		} else if d == 0 {
			c.StaleTTL = -1 // never serve stale answers
		} else {
			c.StaleTTL = d
		}
	}
	return c, errors.Join(errs...)
}

// LevelVar is a convenience for building a slog handler from a Proxy.
func (p *Proxy) LevelVar() *slog.LevelVar {
	v := new(slog.LevelVar)
	v.Set(p.LogLevel)
	return v
}

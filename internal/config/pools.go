package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/ipaddr"
	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/proxyauth"
	"egret.io/egret/internal/upstream"
)

// memberSpecs reads the config file's members.
func memberSpecs(specs []MemberSpec, where string) ([]upstream.MemberSpec, error) {
	var out []upstream.MemberSpec
	var errs []error
	for i, s := range specs {
		if s.spec != "" {
			m, err := upstream.ParseMemberSpec(s.spec)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.members[%d]: %w", where, i, err))
				continue
			}
			out = append(out, m)
			continue
		}
		m, err := upstream.ParseMemberURL(s.URL)
		if err == nil && (s.Weight < 0 || s.Weight > upstream.MaxWeight) {
			err = fmt.Errorf("upstream proxy %s: weight %d: want 1-%d", m.Name(), s.Weight, upstream.MaxWeight)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.members[%d]: %w", where, i, err))
			continue
		}
		if s.Weight > 0 {
			m.Weight = s.Weight
		}
		m.Backup = s.Backup
		m.SPN = strings.TrimSpace(s.SPN)
		if m.Auth, err = proxyauth.ParseScheme(s.Auth); err == nil {
			err = m.CheckAuth()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.members[%d]: %w", where, i, err))
			continue
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}

// duration reads a duration setting: the environment key (if any, and
// set) wins over the file's value; "" keeps def. Zero is allowed only when
// zeroOK.
func (l *loader) duration(key, file, name string, def time.Duration, zeroOK bool, bad func(error)) time.Duration {
	v := file
	if key != "" {
		if ev, ok := l.get(key); ok {
			v, name = ev, key
		}
	}
	if strings.TrimSpace(v) == "" {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 || (d == 0 && !zeroOK) {
		bad(fmt.Errorf("%s: %q is not a duration like 10s or 1m30s", name, v))
		return def
	}
	return d
}

// boolean reads a true/false setting from the environment key, when set;
// def (the file's value or the default) otherwise.
func (l *loader) boolean(key string, def bool, bad func(error)) bool {
	v, ok := l.get(key)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		bad(fmt.Errorf("%s %q: want true or false", key, v))
		return def
	}
	return b
}

// integer reads a non-negative integer setting (env over file).
func (l *loader) integer(key string, file int, name string, bad func(error)) int {
	if v, ok := l.get(key); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			bad(fmt.Errorf("%s: %q is not a number >= 0", key, v))
			return file
		}
		return n
	}
	if file < 0 {
		bad(fmt.Errorf("%s: %d is negative", name, file))
		return 0
	}
	return file
}

// credentials locates the credentials directory: PROXY_CREDENTIALS_DIR,
// then credentials.dir, then the default directory when it holds a
// username file.
func (l *loader) credentials(f *File, p *Proxy, bad func(error)) {
	c := &p.Credentials
	c.Dir, c.Required = f.Credentials.Dir, f.Credentials.Dir != ""
	if v, ok := l.get("PROXY_CREDENTIALS_DIR"); ok {
		c.Dir, c.Required = strings.TrimSpace(v), true
	}
	if c.Dir == "" && l.src.DefaultCredentialsDir != "-" {
		dir := l.src.DefaultCredentialsDir
		if dir == "" {
			dir = credentials.DefaultDir
		}
		if credentials.Present(dir) {
			c.Dir = dir
		}
	}
	c.CheckInterval = l.duration("EGRET_CREDENTIALS_CHECK_INTERVAL", f.Credentials.CheckInterval, "config credentials.check_interval", 0, false, bad)
	if c.Required {
		if _, err := os.Stat(c.Dir); err != nil {
			bad(fmt.Errorf("credentials directory: %w", err))
		}
	}
}

// poolOptions compiles each pool's settings, applies the EGRET_UPSTREAM_*
// variables to the default pool and adds the members of member files to
// the static ones. A pool with no member and no member file is left out.
func (l *loader) poolOptions(f *File, p *Proxy, static map[string][]upstream.MemberSpec, bad func(error)) {
	names := map[string]bool{}
	for n := range f.Pools {
		names[n] = true
	}
	for n := range static {
		names[n] = true
	}
	envFile, _ := l.get("EGRET_UPSTREAM_FILE")
	if envFile != "" {
		names[DefaultPool] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		if n != "" {
			sorted = append(sorted, n)
		}
	}
	sort.Strings(sorted)
	for _, name := range sorted {
		ps := f.Pools[name]
		where := "config pools." + name
		isDef := name == DefaultPool
		envOr := func(key, v string) string {
			if isDef {
				if ev, ok := l.get(key); ok {
					return ev
				}
			}
			return v
		}
		key := func(k string) string {
			if isDef {
				return k
			}
			return ""
		}
		var o Pool
		var err error
		if o.Policy, err = upstream.ParsePolicy(envOr("EGRET_UPSTREAM_POLICY", ps.Policy)); err != nil {
			bad(fmt.Errorf("%s.policy: %w", where, err))
		}
		o.Backoff.Initial = l.duration("", ps.Backoff.Initial, where+".backoff.initial", 0, false, bad)
		o.Backoff.Max = l.duration("", ps.Backoff.Max, where+".backoff.max", 0, false, bad)
		o.Probe.Target = strings.TrimSpace(envOr("EGRET_UPSTREAM_PROBE", ps.Probe.Target))
		if o.Probe.Target != "" {
			if _, err := upstreamTarget(o.Probe.Target); err != nil {
				bad(fmt.Errorf("%s.probe.target: %w", where, err))
			}
		}
		o.Probe.Interval = l.duration(key("EGRET_UPSTREAM_PROBE_INTERVAL"), ps.Probe.Interval, where+".probe.interval", 0, false, bad)
		o.Probe.Timeout = l.duration("", ps.Probe.Timeout, where+".probe.timeout", 0, false, bad)
		o.CAFile = strings.TrimSpace(envOr("EGRET_UPSTREAM_CA_FILE", ps.TLS.CAFile))
		o.ServerName = ps.TLS.ServerName
		if o.CAFile != "" {
			if pem, err := l.src.ReadFile(o.CAFile); err != nil {
				bad(fmt.Errorf("%s.tls.ca_file: %w", where, err))
			} else if o.RootCAs = x509.NewCertPool(); !o.RootCAs.AppendCertsFromPEM(pem) {
				bad(fmt.Errorf("%s.tls.ca_file %s: no PEM certificate in it", where, o.CAFile))
			}
		}
		for _, n := range ps.Namespaces {
			n = strings.TrimSpace(n)
			if n != "*" && !namespaceName(n) {
				bad(fmt.Errorf("%s.namespaces: %q is not a namespace name (or \"*\" for every namespace)", where, n))
				continue
			}
			o.Namespaces = append(o.Namespaces, n)
		}
		o.MembersFile = strings.TrimSpace(ps.MembersFile)
		if isDef && envFile != "" {
			o.MembersFile = strings.TrimSpace(envFile)
		}
		o.Static = static[name]
		o.Members = append([]upstream.MemberSpec(nil), o.Static...)
		if o.MembersFile != "" {
			data, err := l.src.ReadFile(o.MembersFile)
			if err != nil {
				bad(fmt.Errorf("%s.members_file: %w", where, err))
			} else if ms, err := upstream.ParseMemberList(string(data)); err != nil {
				bad(fmt.Errorf("%s.members_file %s: %w", where, o.MembersFile, err))
			} else {
				o.Members = append(o.Members, ms...)
			}
		}
		if len(o.Members) > 0 || o.MembersFile != "" {
			p.Pools[name] = o
		}
	}
}

// upstreamTarget checks a probe target is host:port.
func upstreamTarget(s string) (string, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", fmt.Errorf("%q: want host:port", s)
	}
	if n, err := strconv.ParseUint(s[i+1:], 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("%q: bad port", s)
	}
	return s, nil
}

// prefixes parses CIDRs or single addresses.
func prefixes(vals []string, name string, bad func(error)) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		pfx, err := ipaddr.ParsePrefix(v)
		if err != nil {
			bad(fmt.Errorf("%s: %w", name, err))
			continue
		}
		out = append(out, pfx)
	}
	return out
}

func (l *loader) gateway(f *File, p *Proxy, bad func(error)) {
	g := &p.Gateway
	clients, name := f.Gateway.ClientCIDRs, "config gateway.client_cidrs"
	if v, ok := l.get("EGRET_CLIENT_CIDRS"); ok {
		clients, name = splitList(v), "EGRET_CLIENT_CIDRS"
	}
	g.ClientCIDRs = prefixes(clients, name, bad)
	allow, name := f.Gateway.AllowCIDRs, "config gateway.allow_cidrs"
	if v, ok := l.get("EGRET_SSRF_ALLOW_CIDRS"); ok {
		allow, name = splitList(v), "EGRET_SSRF_ALLOW_CIDRS"
	}
	g.AllowCIDRs = prefixes(allow, name, bad)
	g.SSRFGuard = p.Role == RoleGateway
	if f.Gateway.SSRFGuard != nil {
		g.SSRFGuard = *f.Gateway.SSRFGuard
	}
	g.SSRFGuard = l.boolean("EGRET_SSRF_GUARD", g.SSRFGuard, bad)
	switch v := strings.ToLower(l.str("EGRET_SHORT_NAMES", f.Gateway.ShortNames, "refuse")); v {
	case "refuse":
	case "route":
		g.RouteShortNames = true
	case "off":
		g.ResolveShortNames = true
	default:
		bad(fmt.Errorf("EGRET_SHORT_NAMES %q: want refuse, route or off", v))
	}
	g.ClusterDomain = strings.Trim(strings.ToLower(l.str("EGRET_CLUSTER_DOMAIN", f.Gateway.ClusterDomain, "")), ".")
	if d := g.ClusterDomain; d != "" && (strings.ContainsAny(d, " /:@") || strings.Contains(d, "..")) {
		bad(fmt.Errorf("EGRET_CLUSTER_DOMAIN %q: want a DNS domain like cluster.local", d))
	}
}

func (l *loader) limits(f *File, p *Proxy, bad func(error)) {
	fl := f.Limits
	lm := &p.Limits
	lm.MaxTunnels = l.integer("EGRET_MAX_TUNNELS", fl.MaxTunnels, "config limits.max_tunnels", bad)
	maxConc, maxConns := 0, 0
	if p.Role == RoleGateway {
		maxConc, maxConns = DefaultClientMaxConcurrent, DefaultClientMaxConnections
	}
	if v := fl.PerClient.MaxConcurrent; v != nil {
		maxConc = *v
	}
	if v := fl.PerClient.MaxConnections; v != nil {
		maxConns = *v
	}
	lm.ClientMaxConcurrent = l.integer("EGRET_CLIENT_MAX_CONCURRENT", maxConc, "config limits.per_client.max_concurrent", bad)
	lm.ClientMaxConnections = l.integer("EGRET_CLIENT_MAX_CONNECTIONS", maxConns, "config limits.per_client.max_connections", bad)
	lm.PerDestination = limit.Limit{
		Rate:          fl.PerDestination.Rate,
		Burst:         l.integer("EGRET_DEST_BURST", fl.PerDestination.Burst, "config limits.per_destination.burst", bad),
		MaxConcurrent: l.integer("EGRET_DEST_MAX_CONCURRENT", fl.PerDestination.MaxConcurrent, "config limits.per_destination.max_concurrent", bad),
	}
	if v, ok := l.get("EGRET_DEST_RATE"); ok {
		r, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "/s"), 64)
		if err != nil || r < 0 {
			bad(fmt.Errorf("EGRET_DEST_RATE %q: want requests per second like 50 or 0.5", v))
		}
		lm.PerDestination.Rate = r
	}
	if lm.PerDestination.Rate < 0 {
		bad(errors.New("config limits.per_destination.rate is negative"))
	}
	for i, d := range fl.Destinations {
		where := fmt.Sprintf("config limits.destinations[%d]", i)
		if len(d.Hosts)+len(d.Suffixes) == 0 {
			bad(fmt.Errorf("%s: give hosts or suffixes", where))
			continue
		}
		if d.Rate < 0 || d.Burst < 0 || d.MaxConcurrent < 0 {
			bad(fmt.Errorf("%s: negative limit", where))
			continue
		}
		r := limit.Rule{Limit: limit.Limit{Rate: d.Rate, Burst: d.Burst, MaxConcurrent: d.MaxConcurrent}}
		for _, h := range d.Hosts {
			r.Hosts = append(r.Hosts, strings.ToLower(strings.TrimSuffix(strings.TrimSpace(h), ".")))
		}
		for _, sfx := range d.Suffixes {
			r.Suffixes = append(r.Suffixes, strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(sfx), "*"), ".")))
		}
		lm.Destinations = append(lm.Destinations, r)
	}
	b := &lm.Breaker
	b.Failures = l.integer("EGRET_BREAKER_FAILURES", fl.Breaker.Failures, "config limits.breaker.failures", bad)
	b.OpenFor = l.duration("EGRET_BREAKER_OPEN_FOR", fl.Breaker.OpenFor, "config limits.breaker.open_for", 0, false, bad)
	b.MaxOpenFor = l.duration("", fl.Breaker.MaxOpenFor, "config limits.breaker.max_open_for", 0, false, bad)
}

// namespaceName reports whether s is a Kubernetes namespace name (an
// RFC 1123 label).
func namespaceName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

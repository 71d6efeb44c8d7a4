package intercept

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// SiteSpec is one intercepted destination as written: the hosts, the names
// that stay tunnels, the credentials egret injects and the L7 rules.
type SiteSpec struct {
	// Hosts are the destinations intercepted: "api.example.com" (that
	// name), ".example.com" or "*.example.com" (its subdomains).
	Hosts []string `json:"hosts" yaml:"hosts"`
	// Exempt are TLS server names among Hosts that stay opaque tunnels:
	// clients that pin the origin's certificate, origins that ask for a
	// client certificate. Same forms as Hosts.
	Exempt []string `json:"exempt,omitempty" yaml:"exempt,omitempty"`
	// Credentials are the headers egret sets on every request.
	Credentials []CredentialSpec `json:"credentials,omitempty" yaml:"credentials,omitempty"`
	// HTTP are the method and path rules.
	HTTP RulesSpec `json:"http,omitempty" yaml:"http,omitempty"`
}

// Site is what egret does inside an intercepted destination for one
// workload. It is immutable once built; its Credentials reload themselves.
type Site struct {
	// Name names the site in logs: its first host pattern.
	Name        string
	Hosts       []HostPattern
	Exempt      []HostPattern
	Rules       Rules
	Credentials []*Credential
}

// HostPattern matches a destination host: an exact name, or the
// subdomains of a suffix.
type HostPattern struct {
	Name   string // lower case, no trailing dot; for a suffix, with its leading dot
	Suffix bool
}

func (p HostPattern) String() string { return p.Name }

// Match reports whether host (lower case) matches.
func (p HostPattern) Match(host string) bool {
	host = strings.TrimSuffix(host, ".")
	if p.Suffix {
		return len(host) > len(p.Name) && strings.HasSuffix(host, p.Name)
	}
	return host == p.Name
}

// ParseHostPattern reads "api.example.com", ".example.com" or
// "*.example.com".
func ParseHostPattern(s string) (HostPattern, error) {
	t := strings.ToLower(strings.TrimSuffix(s, "."))
	suffix := false
	switch {
	case strings.HasPrefix(t, "*."):
		t, suffix = t[2:], true
	case strings.HasPrefix(t, "."):
		t, suffix = t[1:], true
	}
	n, err := parseName(t)
	if err != nil {
		return HostPattern{}, fmt.Errorf("host %q: %w", s, err)
	}
	if suffix {
		if n.IP.IsValid() {
			return HostPattern{}, fmt.Errorf("host %q: an address has no subdomains", s)
		}
		return HostPattern{Name: "." + n.DNS, Suffix: true}, nil
	}
	return HostPattern{Name: n.String()}, nil
}

// CompileSite checks a spec. dirOf says where the Secret of a credential
// without files is mounted (nil: every credential must list its files).
func CompileSite(s SiteSpec, dirOf func(CredentialSpec) string) (*Site, error) {
	return CompileSiteWith(s, func(cs CredentialSpec) (*Credential, error) {
		dir := ""
		if dirOf != nil {
			dir = dirOf(cs)
		}
		return NewCredential(cs, dir)
	})
}

// CompileSiteWith checks a spec whose credentials come from elsewhere than
// files: cred builds each (package policy: from a Secret the API server
// holds, Credential.Set).
func CompileSiteWith(s SiteSpec, cred func(CredentialSpec) (*Credential, error)) (*Site, error) {
	if len(s.Hosts) == 0 {
		return nil, fmt.Errorf("an intercepted site needs at least one host")
	}
	site := &Site{}
	for _, h := range s.Hosts {
		p, err := ParseHostPattern(h)
		if err != nil {
			return nil, err
		}
		site.Hosts = append(site.Hosts, p)
	}
	site.Name = site.Hosts[0].Name
	for _, h := range s.Exempt {
		p, err := ParseHostPattern(h)
		if err != nil {
			return nil, fmt.Errorf("exempt: %w", err)
		}
		site.Exempt = append(site.Exempt, p)
	}
	seen := map[string]bool{}
	for _, cs := range s.Credentials {
		c, err := cred(cs)
		if err != nil {
			return nil, fmt.Errorf("site %s: %w", site.Name, err)
		}
		if seen[c.Header] {
			return nil, fmt.Errorf("site %s: two credentials set %s", site.Name, c.Header)
		}
		seen[c.Header] = true
		site.Credentials = append(site.Credentials, c)
	}
	var err error
	if site.Rules, err = CompileRules(s.HTTP); err != nil {
		return nil, fmt.Errorf("site %s: http: %w", site.Name, err)
	}
	return site, nil
}

// Matches reports whether the site covers host.
func (s *Site) Matches(host string) bool {
	for _, p := range s.Hosts {
		if p.Match(host) {
			return true
		}
	}
	return false
}

// IsExempt reports whether a TLS server name stays a tunnel.
func (s *Site) IsExempt(sni string) bool {
	sni = strings.ToLower(sni)
	for _, p := range s.Exempt {
		if p.Match(sni) {
			return true
		}
	}
	return false
}

// Load reads every credential's files once.
func (s *Site) Load() error {
	for _, c := range s.Credentials {
		if err := c.Load(); err != nil {
			return err
		}
	}
	return nil
}

// Run follows every credential's files until ctx ends.
func (s *Site) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range s.Credentials {
		wg.Go(func() { _ = c.Run(ctx) })
	}
	wg.Wait()
}

// Sites is an ordered list of intercepted sites: the first whose hosts
// match a destination is its site.
type Sites []*Site

// Lookup returns the site for host, or nil: an opaque tunnel.
func (ss Sites) Lookup(host string) *Site {
	host = strings.ToLower(host)
	for _, s := range ss {
		if s.Matches(host) {
			return s
		}
	}
	return nil
}

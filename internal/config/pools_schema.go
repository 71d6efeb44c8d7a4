package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// PoolSpec is an upstream pool.
type PoolSpec struct {
	// Members are proxy URLs: http://[user:pass@]host:port, https://...,
	// socks5://..., each a string ("URL [weight=N] [backup]") or an object.
	// Prefer credentials from the environment or a mounted Secret over
	// writing them here.
	Members []MemberSpec `json:"members,omitempty"`
	// MembersFile is a file of members, one per line in the string form,
	// '#' comments; it is re-read when it changes (a mounted Secret or
	// ConfigMap). Its members join Members.
	MembersFile string `json:"members_file,omitempty"`
	// Policy is round_robin (default), random, least_conn or sticky.
	Policy string `json:"policy,omitempty"`
	// Backoff is how long a failing member stays down.
	Backoff BackoffSpec `json:"backoff,omitempty"`
	// Probe is an active health check.
	Probe ProbeSpec `json:"probe,omitempty"`
	// TLS configures https:// members.
	TLS TLSSpec `json:"tls,omitempty"`
	// Namespaces are the namespaces whose EgressPolicies may name this
	// pool (per-workload egress); "*" is every namespace. None: no
	// EgressPolicy may (the ClusterEgressPolicy default and the gateway's
	// routes always may). The pool carries an upstream and its
	// credentials, so the grant is the gateway operator's, beside them.
	Namespaces []string `json:"namespaces,omitempty"`
}

// MemberSpec is one member: a string "URL [weight=N] [backup]
// [auth=basic|ntlm|negotiate] [spn=HTTP/host]" or an object {url, weight,
// backup, auth, spn}.
type MemberSpec struct {
	URL    string `json:"url"`
	Weight int    `json:"weight,omitempty"`
	Backup bool   `json:"backup,omitempty"`
	// Auth is how egret authenticates to the member: basic (default), ntlm
	// or negotiate (Kerberos).
	Auth string `json:"auth,omitempty"`
	// SPN is a negotiate member's Kerberos service principal (default
	// HTTP/<the member's host>).
	SPN string `json:"spn,omitempty"`
	// spec is the string form, when the member was written as a string.
	spec string
}

// UnmarshalJSON accepts the string or the object form.
func (m *MemberSpec) UnmarshalJSON(b []byte) error {
	if b = bytes.TrimSpace(b); len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &m.spec)
	}
	type plain MemberSpec
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("member: %w", err)
	}
	if p.URL == "" {
		return errors.New("member: url is required")
	}
	*m = MemberSpec(p)
	return nil
}

// MarshalJSON writes the form the member was read in.
func (m MemberSpec) MarshalJSON() ([]byte, error) {
	if m.spec != "" {
		return json.Marshal(m.spec)
	}
	type plain MemberSpec
	return json.Marshal(plain(m))
}

// BackoffSpec: a failing member is down for Initial, doubling with each
// consecutive failure up to Max.
type BackoffSpec struct {
	Initial string `json:"initial,omitempty"` // default 1s
	Max     string `json:"max,omitempty"`     // default 2m
}

// ProbeSpec is an active health check: a CONNECT to Target through every
// member every Interval.
type ProbeSpec struct {
	Target   string `json:"target,omitempty"`   // host:port; no probes when empty
	Interval string `json:"interval,omitempty"` // default 10s
	Timeout  string `json:"timeout,omitempty"`  // default 5s
}

// TLSSpec configures TLS to https:// members.
type TLSSpec struct {
	CAFile     string `json:"ca_file,omitempty"`     // PEM bundle of CAs to trust instead of the system's
	ServerName string `json:"server_name,omitempty"` // name to verify instead of the member's host
}

// CredentialsSpec points at a mounted Secret with "username" and
// "password" keys (for Kerberos also "keytab", which may stand in for the
// password, and "krb5.conf").
type CredentialsSpec struct {
	Dir           string `json:"dir,omitempty"`            // default /var/run/secrets/proxy when present
	CheckInterval string `json:"check_interval,omitempty"` // safety-net re-read (default 10s)
}

// GatewaySpec hardens a shared proxy.
type GatewaySpec struct {
	// ClientCIDRs, when set, are the only client addresses served.
	ClientCIDRs []string `json:"client_cidrs,omitempty"`
	// SSRFGuard refuses to connect to loopback, link-local (metadata),
	// unspecified and multicast addresses and the proxy's own addresses;
	// default true for the gateway role, false for the sidecar.
	SSRFGuard *bool `json:"ssrf_guard,omitempty"`
	// AllowCIDRs are exempt from the SSRF guard.
	AllowCIDRs []string `json:"allow_cidrs,omitempty"`
	// ShortNames is refuse (default), route or off: what the gateway does with
	// a single-label or name.namespace destination.
	ShortNames string `json:"short_names,omitempty"`
	// ClusterDomain is the cluster DNS domain (default cluster.local).
	ClusterDomain string `json:"cluster_domain,omitempty"`
}

// LimitsSpec protects destinations and the proxy. Zero values mean no limit.
type LimitsSpec struct {
	// MaxTunnels bounds the tunnels open at once (CONNECT, transparent,
	// SOCKS5).
	MaxTunnels int `json:"max_tunnels,omitempty"`
	// PerClient bounds one client address's requests, tunnels and
	// connections.
	PerClient ClientLimitSpec `json:"per_client,omitempty"`
	// PerDestination applies to each destination host on its own.
	PerDestination DestLimitSpec `json:"per_destination,omitempty"`
	// Destinations override PerDestination for matching hosts (first match).
	Destinations []DestRuleSpec `json:"destinations,omitempty"`
	// Breaker is the per-destination circuit breaker (off unless failures
	// is set).
	Breaker BreakerSpec `json:"breaker,omitempty"`
}

// ClientLimitSpec bounds one client address. Unset takes the role's
// default (gateway: DefaultClientMaxConcurrent and
// DefaultClientMaxConnections; sidecar: none); 0 means no limit.
type ClientLimitSpec struct {
	// MaxConcurrent bounds its requests and tunnels in flight.
	MaxConcurrent *int `json:"max_concurrent,omitempty"`
	// MaxConnections bounds its open connections, idle keep-alive ones
	// included; a connection over it is refused as it arrives.
	MaxConnections *int `json:"max_connections,omitempty"`
}

// DestLimitSpec bounds one destination host.
type DestLimitSpec struct {
	Rate          float64 `json:"rate,omitempty"`  // new requests and tunnels per second
	Burst         int     `json:"burst,omitempty"` // default max(1, rate)
	MaxConcurrent int     `json:"max_concurrent,omitempty"`
}

// DestRuleSpec is a per-destination limit for some hosts.
type DestRuleSpec struct {
	Hosts    []string `json:"hosts,omitempty"`
	Suffixes []string `json:"suffixes,omitempty"`
	DestLimitSpec
}

// BreakerSpec configures the per-destination circuit breaker.
type BreakerSpec struct {
	Failures   int    `json:"failures,omitempty"`     // consecutive connection failures that open it
	OpenFor    string `json:"open_for,omitempty"`     // default 30s; doubles after a failed trial
	MaxOpenFor string `json:"max_open_for,omitempty"` // default 5m
}

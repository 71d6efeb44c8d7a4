package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Policy configures per-workload egress at the gateway: EgressPolicy
// resources, client identity from pods and service-account tokens, and
// workload limits.
type Policy struct {
	// Enabled turns it on (EGRET_POLICY).
	Enabled bool
	// Kubeconfig is the API server's kubeconfig file; "" means in-cluster.
	Kubeconfig string
	// TokenAudience is the audience clients' tokens must have ("" means
	// egret).
	TokenAudience string
	// RateLimit is the shared rate-limit service; Service "" means local
	// token buckets.
	RateLimit RateLimit
}

// RateLimit locates an Envoy rate-limit service (gRPC
// envoy.service.ratelimit.v3).
type RateLimit struct {
	Service    string // host:port
	Domain     string // "" means egret
	FailClosed bool   // refuse when the service cannot answer
	Timeout    time.Duration
}

// policy reads the EGRET_POLICY settings.
func (l *loader) policy(p *Proxy, bad func(error)) {
	c := &p.Policy
	c.Enabled = l.boolean("EGRET_POLICY", false, bad)
	c.Kubeconfig = l.str("EGRET_POLICY_KUBECONFIG", "", "")
	c.TokenAudience = l.str("EGRET_TOKEN_AUDIENCE", "", "")
	r := &c.RateLimit
	r.Service = l.str("EGRET_RATELIMIT_SERVICE", "", "")
	r.Domain = l.str("EGRET_RATELIMIT_DOMAIN", "", "")
	r.Timeout = l.duration("EGRET_RATELIMIT_TIMEOUT", "", "EGRET_RATELIMIT_TIMEOUT", 0, false, bad)
	switch v := strings.ToLower(l.str("EGRET_RATELIMIT_FAILURE_MODE", "", "open")); v {
	case "open":
	case "closed":
		r.FailClosed = true
	default:
		bad(fmt.Errorf("EGRET_RATELIMIT_FAILURE_MODE %q: want open or closed", v))
	}
	if r.Service != "" {
		if _, _, err := net.SplitHostPort(r.Service); err != nil {
			bad(fmt.Errorf("EGRET_RATELIMIT_SERVICE %q: want host:port of the rate-limit service's gRPC listener", r.Service))
		}
	}
	if !c.Enabled {
		set := ""
		for _, k := range []string{"EGRET_POLICY_KUBECONFIG", "EGRET_TOKEN_AUDIENCE", "EGRET_RATELIMIT_SERVICE", "EGRET_RATELIMIT_DOMAIN", "EGRET_RATELIMIT_TIMEOUT", "EGRET_RATELIMIT_FAILURE_MODE"} {
			if _, ok := l.get(k); ok && set == "" {
				set = k
			}
		}
		if set != "" {
			bad(fmt.Errorf("%s is set but EGRET_POLICY is not: set EGRET_POLICY=true to use per-workload policies", set))
		}
	}
	if c.Kubeconfig != "" {
		if _, err := os.Stat(c.Kubeconfig); err != nil {
			bad(fmt.Errorf("EGRET_POLICY_KUBECONFIG: %w", err))
		}
	}
}

// upstreamToken reads EGRET_UPSTREAM_TOKEN_FILE: the pod's projected
// service-account token, presented to members without credentials (the
// gateway) instead of a user name and password.
func (l *loader) upstreamToken(p *Proxy, bad func(error)) {
	c := &p.Credentials
	c.TokenFile = l.str("EGRET_UPSTREAM_TOKEN_FILE", "", "")
	if c.TokenFile == "" {
		return
	}
	if c.Required {
		bad(errors.New("EGRET_UPSTREAM_TOKEN_FILE and a credentials directory are both set: a member presents one or the other"))
	}
	c.Dir, c.Required = "", false
	if _, err := os.Stat(c.TokenFile); err != nil {
		bad(fmt.Errorf("EGRET_UPSTREAM_TOKEN_FILE: %w", err))
	}
}

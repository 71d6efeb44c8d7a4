package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/ipaddr"
	"egret.io/egret/internal/ratelimit"
	"egret.io/egret/internal/route"
)

// Mode is how a policy is applied.
type Mode uint8

// Modes.
const (
	Enforce Mode = iota + 1
	Report
)

func (m Mode) String() string {
	switch m {
	case Enforce:
		return "enforce"
	case Report:
		return "report"
	}
	return "unknown(" + strconv.Itoa(int(m)) + ")"
}

// SNIMode is whether CONNECT tunnels to TLS ports have their ClientHello
// checked against the CONNECT target. Larger is stricter.
type SNIMode uint8

// SNI modes.
const (
	SNIOff SNIMode = iota
	SNIReport
	SNIEnforce
)

func (m SNIMode) String() string {
	switch m {
	case SNIOff:
		return "off"
	case SNIReport:
		return "report"
	case SNIEnforce:
		return "enforce"
	}
	return "unknown(" + strconv.Itoa(int(m)) + ")"
}

// Compiled is one validated policy: its rules as route rules, ready to be
// combined with the other policies that apply to a client. It is
// immutable.
type Compiled struct {
	// Key names the policy in logs, metrics and explain: "namespace/name",
	// or "ClusterEgressPolicy/default".
	Key       string
	Namespace string // "" for the cluster default
	Name      string
	Cluster   bool
	Mode      Mode
	// Err is why the policy is invalid (nil when valid); Reason is the
	// status condition's reason. An invalid policy denies every
	// destination to the pods it would select (all of its namespace when
	// its selector is what is invalid).
	Err        error
	Reason     string
	Generation int64
	UID        string

	selector    labels.Selector // nil: every pod of the namespace
	specificity int             // requirements in the selector
	denies      []route.Rule
	allows      []route.Rule
	def         route.Action // Deny, Direct (allowed: the gateway's routes decide) or Upstream
	defPool     string
	defSource   string // the default's rule source
	display     string // "EgressPolicy ns/name", "ClusterEgressPolicy default"
	limit       ratelimit.Limit
	sni         SNIMode
	sites       intercept.Sites // intercepted destinations, in order
	src         *EgressPolicy   // what was compiled, for Engine.Recheck
	// denyT and allowT are denies and allows compiled once: every
	// combination of policies shares them (route.Join).
	denyT, allowT *route.Table
	size          int // Size
	created       time.Time
}

// Size is the policy's size as the gateway's limits count it: the bytes
// of its hosts, suffixes and CIDRs as written, and 64 bytes per rule.
func (c *Compiled) Size() int { return c.size }

// Selects reports whether the policy applies to a pod with labels l in
// its namespace.
func (c *Compiled) Selects(l labels.Labels) bool {
	return c.selector == nil || c.selector.Matches(l)
}

// Limit returns the policy's limits.
func (c *Compiled) Limit() ratelimit.Limit { return c.limit }

// Compile validates a policy. pools reports whether a pool exists in the
// gateway (nil accepts any name). It always returns a Compiled: an invalid
// policy compiles to one that denies everything (see Compiled.Err).
func Compile(p *EgressPolicy, cluster bool, pools func(string) bool) *Compiled {
	return compile(p, cluster, pools, nil, validating{})
}

// Interception is what the gateway offers the policies that intercept
// (package proxyd wires Secrets): nil when it has no interception CA.
type Interception interface {
	// Granted reports whether policies may name the Secret
	// namespace/name (the gateway's intercept.secrets).
	Granted(namespace, name string) bool
	// Credential returns the credential of spec whose value comes from
	// the keys of the Secret namespace/name, kept current as the Secret
	// changes.
	Credential(spec intercept.CredentialSpec, namespace, name string, keys []string) (*intercept.Credential, error)
}

// compile is Compile, with granted saying whether an EgressPolicy of a
// namespace may name a pool (nil: every pool). The cluster default may
// name any pool the gateway has.
func compile(p *EgressPolicy, cluster bool, pools func(string) bool, granted func(pool, namespace string) bool, ic Interception) *Compiled {
	c := &Compiled{src: p, created: p.CreationTimestamp.Time, Namespace: p.Namespace, Name: p.Name, Cluster: cluster, Mode: Enforce, Generation: p.Generation, UID: string(p.UID), Reason: ReasonValid}
	if cluster {
		c.Key, c.Namespace = KindClusterEgressPolicy+"/"+p.Name, ""
	} else {
		c.Key = p.Namespace + "/" + p.Name
	}
	c.display = KindEgressPolicy + " " + c.Key
	if cluster {
		c.display = KindClusterEgressPolicy + " " + p.Name
	}
	c.defSource = c.display + " default"
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	reason := ReasonInvalid
	s := &p.Spec

	switch strings.ToLower(s.Mode) {
	case "", "enforce":
	case "report":
		c.Mode = Report
	default:
		bad("mode %q: want enforce or report", s.Mode)
	}
	if cluster {
		if p.Name != DefaultName {
			bad("only the ClusterEgressPolicy named %q is used (this one is %q)", DefaultName, p.Name)
			reason = ReasonNotDefault
		}
		if s.PodSelector != nil && (len(s.PodSelector.MatchLabels) > 0 || len(s.PodSelector.MatchExpressions) > 0) {
			bad("podSelector: a ClusterEgressPolicy selects no pods (it applies to those no EgressPolicy selects)")
		}
	} else if s.PodSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.PodSelector)
		if err != nil {
			bad("podSelector: %v", err)
		} else if !sel.Empty() {
			c.selector = sel
			c.specificity = len(s.PodSelector.MatchLabels) + len(s.PodSelector.MatchExpressions)
		}
	}
	poolOK := func(what, name string) {
		if name != "" && pools != nil && !pools(name) {
			bad("%s: pool %q does not exist in this gateway", what, name)
			reason = ReasonUnknownPool
		} else if name != "" && !cluster && granted != nil && !granted(name, p.Namespace) {
			bad("%s: pool %q is not granted to namespace %q (the gateway's pools.%s.namespaces)", what, name, p.Namespace, name)
			if reason == ReasonInvalid {
				reason = ReasonPoolNotGranted
			}
		}
	}
	src := func(i int, r *Rule) string {
		if r.Name != "" {
			return c.display + " rule " + r.Name
		}
		return c.display + " egress[" + strconv.Itoa(i) + "]"
	}
	for i := range s.Egress {
		r := &s.Egress[i]
		m, err := compileMatch(r)
		if err != nil {
			bad("egress[%d]: %v", i, err)
			continue
		}
		rr := route.Rule{Match: m, Source: src(i, r)}
		switch strings.ToLower(r.Action) {
		case "allow":
			rr.Action = route.Direct
			if r.Pool != "" {
				rr.Action, rr.Pool = route.Upstream, r.Pool
				poolOK(fmt.Sprintf("egress[%d]", i), r.Pool)
			} else if s.Pool != "" {
				rr.Action, rr.Pool = route.Upstream, s.Pool
			}
			c.allows = append(c.allows, rr)
		case "deny":
			if r.Pool != "" {
				bad("egress[%d]: a deny rule has no pool", i)
			}
			rr.Action = route.Deny
			c.denies = append(c.denies, rr)
		default:
			bad("egress[%d]: action %q: want allow or deny", i, r.Action)
		}
	}
	poolOK("pool", s.Pool)
	switch strings.ToLower(s.Default) {
	case "", "deny":
		c.def = route.Deny
	case "allow":
		c.def = route.Direct
		if s.Pool != "" {
			c.def, c.defPool = route.Upstream, s.Pool
		}
	default:
		bad("default %q: want deny or allow", s.Default)
	}
	if l := s.Limits; l != nil {
		c.limit = ratelimit.Limit{Requests: int(l.Requests), MaxConcurrent: int(l.MaxConcurrent), Per: time.Second}
		switch strings.ToLower(l.Unit) {
		case "", "second":
		case "minute":
			c.limit.Per = time.Minute
		case "hour":
			c.limit.Per = time.Hour
		default:
			bad("limits.unit %q: want second, minute or hour", l.Unit)
		}
		if l.Requests < 0 || l.MaxConcurrent < 0 {
			bad("limits: requests and maxConcurrent are not negative")
		}
	}
	switch strings.ToLower(s.SNI) {
	case "", "off":
	case "report":
		c.sni = SNIReport
	case "enforce":
		c.sni = SNIEnforce
	default:
		bad("sni %q: want off, report or enforce", s.SNI)
	}
	if len(s.Intercept) > 0 {
		var why string
		var ierrs []error
		c.sites, why, ierrs = compileIntercept(p, cluster, ic)
		if len(ierrs) > 0 {
			errs = append(errs, ierrs...)
			if reason == ReasonInvalid {
				reason = why
			}
		}
	}
	c.size = specSize(s)
	if err := checkLimits(s, c.size); err != nil && len(errs) == 0 {
		errs, reason = append(errs, err), ReasonLimitExceeded
	}
	if why, ok := strings.CutPrefix(s.Mode, heldBackMode); ok {
		errs, reason = []error{errors.New(why)}, ReasonLimitExceeded
	}
	if len(errs) == 0 {
		var err error
		if c.denyT, err = route.New(c.denies, route.Deny, ""); err == nil {
			c.allowT, err = route.New(c.allows, route.Deny, "")
		}
		if err != nil {
			bad("%v", err)
		}
	}
	if len(errs) > 0 {
		c.invalidate(errors.Join(errs...), reason)
	}
	if c.Mode == Report && c.sni == SNIEnforce {
		c.sni = SNIReport // a report-only policy refuses nothing
	}
	return c
}

// invalidate makes c deny everything, for err.
func (c *Compiled) invalidate(err error, reason string) {
	c.Err, c.Reason = err, reason
	c.denies = []route.Rule{{Match: route.Match{Any: true}, Action: route.Deny,
		Source: c.display + " (invalid: see its status)"}}
	c.allows, c.def, c.defPool, c.limit, c.sni, c.sites = nil, route.Deny, "", ratelimit.Limit{}, SNIOff, nil
	c.denyT, _ = route.New(c.denies, route.Deny, "")
	c.allowT, _ = route.New(nil, route.Deny, "")
}

func kindOf(cluster bool) string {
	if cluster {
		return KindClusterEgressPolicy
	}
	return KindEgressPolicy
}

// compileMatch turns a rule's matchers into a route.Match; route.New
// checks the host names.
func compileMatch(r *Rule) (route.Match, error) {
	var m route.Match
	var errs []error
	for _, h := range r.Hosts {
		h = strings.TrimSpace(h)
		if h == "*" {
			m.Any = true
			continue
		}
		if _, err := route.NewDest(h, 1); err != nil {
			errs = append(errs, fmt.Errorf("host %q: %v", h, err))
			continue
		}
		m.Hosts = append(m.Hosts, h)
	}
	for _, s := range r.Suffixes {
		sf, err := route.ParseSuffix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("suffix %q: %v", s, err))
			continue
		}
		m.Suffixes = append(m.Suffixes, sf)
	}
	for _, s := range r.CIDRs {
		p, err := ipaddr.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("cidr %w", err))
			continue
		}
		m.CIDRs = append(m.CIDRs, p)
	}
	for _, p := range r.Ports {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("port %d: want 1-65535", p))
			continue
		}
		m.Ports = append(m.Ports, uint16(p))
	}
	if len(errs) == 0 && !m.Any && len(m.Hosts) == 0 && len(m.Suffixes) == 0 && len(m.CIDRs) == 0 && len(m.Ports) == 0 {
		errs = append(errs, errors.New(`matches nothing: give hosts, suffixes, cidrs or ports (hosts: ["*"] matches everything)`))
	}
	return m, errors.Join(errs...)
}

// specSize is the Size of a spec.
func specSize(s *Spec) int {
	n := 0
	for i := range s.Egress {
		r := &s.Egress[i]
		n += 64
		for _, v := range r.Hosts {
			n += len(v)
		}
		for _, v := range r.Suffixes {
			n += len(v)
		}
		for _, v := range r.CIDRs {
			n += len(v)
		}
	}
	for i := range s.Intercept {
		is := &s.Intercept[i]
		n += 64 + 64*len(is.Credentials)
		for _, v := range is.Hosts {
			n += len(v)
		}
		for _, v := range is.Exempt {
			n += len(v)
		}
		if is.HTTP != nil {
			for _, r := range is.HTTP.Rules {
				n += 64
				for _, v := range r.Paths {
					n += len(v)
				}
				for _, v := range r.PathPrefixes {
					n += len(v)
				}
			}
		}
	}
	return n
}

// checkLimits refuses a spec beyond the per-policy limits.
func checkLimits(s *Spec, size int) error {
	var errs []error
	if len(s.Egress) > MaxRules {
		errs = append(errs, fmt.Errorf("egress: %d rules, more than the limit of %d rules per policy", len(s.Egress), MaxRules))
	}
	for i := range s.Egress {
		r := &s.Egress[i]
		for _, f := range []struct {
			name string
			n    int
		}{{"hosts", len(r.Hosts)}, {"suffixes", len(r.Suffixes)}, {"cidrs", len(r.CIDRs)}} {
			if f.n > MaxEntries {
				errs = append(errs, fmt.Errorf("egress[%d].%s: %d entries, more than the limit of %d per rule", i, f.name, f.n, MaxEntries))
			}
		}
		if len(r.Ports) > MaxPorts {
			errs = append(errs, fmt.Errorf("egress[%d].ports: %d entries, more than the limit of %d per rule", i, len(r.Ports), MaxPorts))
		}
	}
	if len(s.Intercept) > MaxInterceptSites {
		errs = append(errs, fmt.Errorf("intercept: %d sites, more than the limit of %d per policy", len(s.Intercept), MaxInterceptSites))
	}
	for i := range s.Intercept {
		is := &s.Intercept[i]
		if len(is.Hosts) > MaxInterceptHosts || len(is.Exempt) > MaxInterceptHosts {
			errs = append(errs, fmt.Errorf("intercept[%d]: more than %d hosts or exempt names", i, MaxInterceptHosts))
		}
		if len(is.Credentials) > MaxCredentials {
			errs = append(errs, fmt.Errorf("intercept[%d].credentials: %d, more than the limit of %d per site", i, len(is.Credentials), MaxCredentials))
		}
		if is.HTTP != nil && len(is.HTTP.Rules) > MaxHTTPRules {
			errs = append(errs, fmt.Errorf("intercept[%d].http.rules: %d, more than the limit of %d per site", i, len(is.HTTP.Rules), MaxHTTPRules))
		}
	}
	if size > MaxPolicyBytes {
		errs = append(errs, fmt.Errorf("the policy's size is %d bytes, more than the limit of %d bytes per policy (hosts, suffixes and cidrs as written, 64 per rule)", size, MaxPolicyBytes))
	}
	return errors.Join(errs...)
}

package discovery

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Default values of Options.
const (
	DefaultClusterDomain = "cluster.local"
	// ConfigMapName is the ConfigMap written into every opted-in namespace.
	ConfigMapName = "egress-proxy-common"
	// ExplainKey is the ConfigMap key holding the JSON explanation.
	ExplainKey = "explain.json"
	// InjectLabel opts a namespace in when set to InjectEnabled.
	InjectLabel   = "egret.io/inject"
	InjectEnabled = "enabled"
	// NoProxyAnnotation on a namespace adds comma-separated entries to the
	// NO_PROXY of that namespace only.
	NoProxyAnnotation = "egret.io/no-proxy"
	// AdditionsKey is the key read from the cluster-wide additions ConfigMap:
	// comma- or newline-separated entries, '#' starts a comment.
	AdditionsKey = "NO_PROXY"
	// maxSources caps the sources listed per entry (a /16 of pod ranges can
	// come from hundreds of nodes).
	maxSources = 16
	// DefaultMaxNodeEntries caps the entries node addresses take: beyond
	// it, each address is covered by its /24 (IPv4) or /64 (IPv6), so a
	// large cluster's NO_PROXY stays far below the kernel's 128 KiB limit
	// for one environment string.
	DefaultMaxNodeEntries = 64
)

// DefaultMetadataAddresses are the cloud instance metadata endpoints
// (AWS/GCP/Azure/OpenStack IPv4, AWS IPv6).
var DefaultMetadataAddresses = []string{"169.254.169.254", "fd00:ec2::254"}

// Options configure the computation. The zero value is usable: the cluster
// domain defaults to DefaultClusterDomain and metadata addresses to
// DefaultMetadataAddresses.
type Options struct {
	// ClusterDomain is the cluster DNS domain (kubelet --cluster-domain).
	// "" takes the domain read from the cluster (Inputs.ClusterDomain),
	// else DefaultClusterDomain.
	ClusterDomain string
	// ServiceCIDRs are used when the cluster has no ServiceCIDR objects
	// (clusters before 1.33, or the API disabled).
	ServiceCIDRs []netip.Prefix
	// PodCIDRs are always added; set them when the CNI does not fill Node
	// spec.podCIDRs (Calico, Cilium cluster-pool IPAM).
	PodCIDRs []netip.Prefix
	// NodeCIDRs are the nodes' subnets, always added; node addresses
	// inside them are not listed one by one.
	NodeCIDRs []netip.Prefix
	// MaxNodeEntries caps the entries node addresses take (0 means
	// DefaultMaxNodeEntries): beyond it they are covered by their /24 or
	// /64, with a warning.
	MaxNodeEntries int
	// MetadataAddresses replaces DefaultMetadataAddresses when non-nil; an
	// empty non-nil slice disables them.
	MetadataAddresses []string
	// Additions names the cluster-wide ConfigMap ("namespace/name") whose
	// AdditionsKey holds user additions; empty disables it.
	Additions string
}

func (o Options) maxNodeEntries() int {
	if o.MaxNodeEntries <= 0 {
		return DefaultMaxNodeEntries
	}
	return o.MaxNodeEntries
}

// domain is the cluster domain and where it came from: the option, else
// the one read from the cluster, else the default.
func (o Options) domain(found Domain) Domain {
	switch {
	case o.ClusterDomain != "":
		return Domain{Name: strings.Trim(o.ClusterDomain, "."), Source: "flag:--cluster-domain"}
	case found.Name != "":
		return found
	}
	return Domain{Name: DefaultClusterDomain, Source: "default"}
}

func (o Options) metadata() []string {
	if o.MetadataAddresses == nil {
		return DefaultMetadataAddresses
	}
	return o.MetadataAddresses
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.ClusterDomain != "" {
		if err := checkDomain(strings.Trim(o.ClusterDomain, ".")); err != nil {
			errs = append(errs, fmt.Errorf("cluster domain %q: %w", o.ClusterDomain, err))
		}
	}
	for _, m := range o.metadata() {
		if _, err := netip.ParseAddr(m); err != nil {
			errs = append(errs, fmt.Errorf("metadata address %q: %w", m, err))
		}
	}
	if o.Additions != "" {
		if ns, name, ok := strings.Cut(o.Additions, "/"); !ok || ns == "" || name == "" {
			errs = append(errs, fmt.Errorf("additions configmap %q: want namespace/name", o.Additions))
		}
	}
	return errors.Join(errs...)
}

// Inputs are the cluster facts NO_PROXY is computed from. Read fills them
// from the API server; tests build them by hand.
type Inputs struct {
	// ServiceCIDRs maps a ServiceCIDR object name to its spec.cidrs.
	ServiceCIDRs map[string][]netip.Prefix
	// NodePodCIDRs maps a Node name to its spec.podCIDRs.
	NodePodCIDRs map[string][]netip.Prefix
	// KubernetesServiceIPs are the clusterIPs of default/kubernetes.
	KubernetesServiceIPs []netip.Addr
	// APIServerAddrs maps an EndpointSlice name to its endpoint addresses.
	APIServerAddrs map[string][]netip.Addr
	// NodeAddrs maps a Node name to its InternalIP addresses.
	NodeAddrs map[string][]netip.Addr
	// ClusterDomain is the domain read from the cluster (ReadClusterDomain);
	// zero when none was found.
	ClusterDomain Domain
	// DomainWarnings say why the cluster domain could not be read, or that
	// its sources disagree.
	DomainWarnings []string
	// Additions are user entries with their source (e.g.
	// "configmap/egret-system/egret-noproxy" or "namespace/payments").
	Additions []Addition
}

// Addition is one user-supplied NO_PROXY entry.
type Addition struct {
	Value  string
	Source string
}

// Kind classifies an entry; entries are ordered by kind, then as listed.
type Kind string

// Kinds in output order.
const (
	KindLoopback    Kind = "loopback"
	KindClusterName Kind = "cluster-name"
	KindServiceCIDR Kind = "service-cidr"
	KindServiceIP   Kind = "service-ip"
	KindAPIServer   Kind = "apiserver"
	KindPodCIDR     Kind = "pod-cidr"
	KindNodeIP      Kind = "node-ip"
	KindMetadata    Kind = "metadata"
	KindAddition    Kind = "addition"
)

// Entry is one NO_PROXY element and where it came from.
type Entry struct {
	Value   string   `json:"entry"`
	Kind    Kind     `json:"kind"`
	Sources []string `json:"sources"`
	// MoreSources counts sources left out of Sources (capped at 16).
	MoreSources int `json:"moreSources,omitempty"`
}

// Result is a computed cluster NO_PROXY. The zero value has no entries.
type Result struct {
	Entries []Entry `json:"entries"`
	// Warnings say what could not be discovered (no Service range, no Pod
	// ranges) so an operator can set the fallback flags.
	Warnings []string `json:"warnings,omitempty"`
}

// Values returns the entries in order.
func (r *Result) Values() []string {
	if r == nil {
		return nil
	}
	out := make([]string, len(r.Entries))
	for i, e := range r.Entries {
		out[i] = e.Value
	}
	return out
}

// Value returns the comma-joined NO_PROXY value.
func (r *Result) Value() string { return strings.Join(r.Values(), ",") }

// ProxyValue is Value without the bracketed IPv6 forms ("[::1]"): the
// NO_PROXY for egret's own proxies (sidecar, gateway), which read NO_PROXY
// with Go's rules, where a bracketed address without a port never matches
// and is refused as a configuration error.
func (r *Result) ProxyValue() string {
	var out []string
	for _, v := range r.Values() {
		if !strings.HasPrefix(v, "[") {
			out = append(out, v)
		}
	}
	return strings.Join(out, ",")
}

// Prefixes returns the entries that are address ranges or addresses, as
// prefixes (a single address becomes a /32 or /128), in order: the cluster
// ranges transparent mode keeps away from the proxy.
func (r *Result) Prefixes() []netip.Prefix {
	if r == nil {
		return nil
	}
	var out []netip.Prefix
	for _, e := range r.Entries {
		if p, err := netip.ParsePrefix(e.Value); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(e.Value); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out
}

// Explain returns the JSON explanation stored beside NO_PROXY.
func (r *Result) Explain() []byte {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil { // a Result always marshals
		panic(err)
	}
	return append(b, '\n')
}

// With returns a copy of r with additions appended (de-duplicated).
func (r *Result) With(adds []Addition) *Result {
	b := newEntryList()
	if r != nil {
		for _, e := range r.Entries {
			b.entries = append(b.entries, Entry{Value: e.Value, Kind: e.Kind, Sources: slices.Clone(e.Sources), MoreSources: e.MoreSources})
			b.index[strings.ToLower(e.Value)] = len(b.entries) - 1
		}
		b.warnings = slices.Clone(r.Warnings)
	}
	for _, a := range adds {
		b.add(a.Value, KindAddition, a.Source)
	}
	return b.result()
}

type entryList struct {
	entries  []Entry
	index    map[string]int
	warnings []string
}

func newEntryList() *entryList { return &entryList{index: map[string]int{}} }

func (b *entryList) add(value string, kind Kind, source string) {
	key := strings.ToLower(value)
	if i, ok := b.index[key]; ok {
		e := &b.entries[i]
		if slices.Contains(e.Sources, source) {
			return
		}
		if len(e.Sources) >= maxSources {
			e.MoreSources++
			return
		}
		e.Sources = append(e.Sources, source)
		return
	}
	b.index[key] = len(b.entries)
	b.entries = append(b.entries, Entry{Value: value, Kind: kind, Sources: []string{source}})
}

// addAddr adds one address; an IPv6 address also in brackets ("::1" and
// "[::1]"): urllib, undici <8.10, proxy-from-env, .NET and Java match IPv6
// hosts only in the bracketed form, the others only in the bare one.
func (b *entryList) addAddr(a netip.Addr, kind Kind, source string) {
	b.add(a.String(), kind, source)
	if a.Is6() && !a.Is4In6() {
		b.add("["+a.String()+"]", kind, source)
	}
}

func (b *entryList) result() *Result {
	return &Result{Entries: b.entries, Warnings: b.warnings}
}

// Compute builds the cluster NO_PROXY from in. The order is fixed by kind
// (loopback, cluster names, Service ranges, the kubernetes Service IPs, API
// server addresses, Pod ranges, node addresses, metadata, additions) and
// sorted within a kind (additions keep their given order), so the same
// cluster always gives the same value.
func Compute(in Inputs, o Options) *Result {
	b := newEntryList()
	for _, v := range []string{"localhost", "127.0.0.1", "::1", "[::1]"} {
		// "[::1]": urllib, undici <8.10, proxy-from-env, .NET and Java match IPv6 only in brackets.
		b.add(v, KindLoopback, "default")
	}
	dom := o.domain(in.ClusterDomain)
	d := dom.Name
	for _, v := range []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + d, ".svc", ".svc." + d, "." + d} {
		b.add(v, KindClusterName, "cluster-domain:"+dom.Source)
	}
	if o.ClusterDomain == "" {
		b.warnings = append(b.warnings, in.DomainWarnings...)
		if in.ClusterDomain.Name == "" {
			b.warnings = append(b.warnings, "cluster domain not found in the cluster (kubelet configz, CoreDNS Corefile): using "+DefaultClusterDomain+"; set --cluster-domain if the cluster uses another")
		}
	}

	if len(in.ServiceCIDRs) > 0 {
		for _, name := range sortedKeys(in.ServiceCIDRs) {
			for _, p := range sortPrefixes(in.ServiceCIDRs[name]) {
				b.add(p.String(), KindServiceCIDR, "servicecidr/"+name)
			}
		}
	} else if len(o.ServiceCIDRs) > 0 {
		for _, p := range sortPrefixes(o.ServiceCIDRs) {
			b.add(p.String(), KindServiceCIDR, "flag:--service-cidr")
		}
	} else {
		b.warnings = append(b.warnings, "no Service range: the cluster has no ServiceCIDR objects and --service-cidr is not set")
	}

	for _, ip := range sortAddrs(in.KubernetesServiceIPs) {
		b.addAddr(ip, KindServiceIP, "service/default/kubernetes")
	}
	for _, name := range sortedKeys(in.APIServerAddrs) {
		for _, ip := range sortAddrs(in.APIServerAddrs[name]) {
			b.addAddr(ip, KindAPIServer, "endpointslice/default/"+name)
		}
	}

	// Pod ranges: Node slices aggregated into the fewest prefixes covering
	// exactly the same addresses; each keeps the nodes it came from.
	type src struct {
		p    netip.Prefix
		from string
	}
	var pods []src
	for _, node := range sortedKeys(in.NodePodCIDRs) {
		for _, p := range in.NodePodCIDRs[node] {
			pods = append(pods, src{p.Masked(), "node/" + node})
		}
	}
	for _, p := range o.PodCIDRs {
		pods = append(pods, src{p.Masked(), "flag:--pod-cidr"})
	}
	all := make([]netip.Prefix, len(pods))
	for i, s := range pods {
		all[i] = s.p
	}
	for _, agg := range Aggregate(all) {
		for _, s := range pods {
			if agg.Contains(s.p.Addr()) && agg.Bits() <= s.p.Bits() {
				b.add(agg.String(), KindPodCIDR, s.from)
			}
		}
	}
	if len(pods) == 0 {
		b.warnings = append(b.warnings, "no Pod range: no Node has spec.podCIDRs and --pod-cidr is not set")
	}
	b.addNodes(in.NodeAddrs, o)

	for _, m := range o.metadata() {
		if a, err := netip.ParseAddr(m); err == nil {
			b.addAddr(a, KindMetadata, "metadata")
		}
	}
	for _, a := range in.Additions {
		b.add(a.Value, KindAddition, a.Source)
	}
	return b.result()
}

// addNodes adds the nodes' subnets (Options.NodeCIDRs) and the InternalIP
// addresses outside them, one entry per address (every runtime matches an
// address; several ignore CIDRs). Beyond Options.MaxNodeEntries they are
// aggregated into the fewest prefixes covering exactly those addresses,
// and if that is still too many, each is covered by its /24 or /64 — with
// a warning, since the runtimes that ignore CIDRs then miss them.
func (b *entryList) addNodes(addrs map[string][]netip.Addr, o Options) {
	for _, p := range sortPrefixes(o.NodeCIDRs) {
		b.add(p.String(), KindNodeIP, "flag:--node-cidr")
	}
	type src struct {
		p    netip.Prefix
		from string
	}
	var nodes []src
	for _, node := range sortedKeys(addrs) {
		for _, a := range addrs[node] {
			a = a.Unmap()
			if slices.ContainsFunc(o.NodeCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
				continue
			}
			nodes = append(nodes, src{netip.PrefixFrom(a, a.BitLen()), "node/" + node})
		}
	}
	all := make([]netip.Prefix, len(nodes))
	for i, s := range nodes {
		all[i] = s.p
	}
	entries := sortPrefixes(all)
	if max := o.maxNodeEntries(); len(entries) > max {
		entries = Aggregate(all)
		if len(entries) > max {
			for i, s := range nodes {
				bits := 24
				if s.p.Addr().Is6() {
					bits = 64
				}
				nodes[i].p, _ = s.p.Addr().Prefix(bits)
				all[i] = nodes[i].p
			}
			entries = Aggregate(all)
		}
		b.warnings = append(b.warnings, fmt.Sprintf("%d node addresses are more than %d entries: listed as %d ranges, which Python, Node.js and other runtimes that ignore CIDRs miss; set --node-cidr to the nodes' subnets",
			len(nodes), max, len(entries)))
	}
	for _, p := range entries {
		for _, s := range nodes {
			if p.Contains(s.p.Addr()) && p.Bits() <= s.p.Bits() {
				if p.IsSingleIP() {
					b.addAddr(p.Addr(), KindNodeIP, s.from)
				} else {
					b.add(p.String(), KindNodeIP, s.from)
				}
			}
		}
	}
}

// ParseAdditions splits a user list: commas, whitespace and newlines
// separate entries, '#' starts a comment to the end of the line. An entry
// with characters no NO_PROXY reader accepts is an error.
func ParseAdditions(s, source string) ([]Addition, error) {
	var out []Addition
	var errs []error
	for _, line := range strings.Split(s, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }) {
			if err := checkEntry(f); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", source, err))
				continue
			}
			out = append(out, Addition{Value: f, Source: source})
		}
	}
	return out, errors.Join(errs...)
}

func checkEntry(e string) error {
	if len(e) > 253 {
		return fmt.Errorf("entry %.20q...: longer than 253 characters", e)
	}
	for _, r := range e {
		ok := r == '.' || r == '-' || r == '*' || r == ':' || r == '/' || r == '[' || r == ']' || r == '_' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return fmt.Errorf("entry %q: character %q is not allowed in a NO_PROXY entry", e, r)
		}
	}
	return nil
}

// Aggregate returns the smallest sorted set of prefixes covering exactly the
// addresses of ps: contained prefixes are dropped and sibling halves merged.
func Aggregate(ps []netip.Prefix) []netip.Prefix {
	cur := sortPrefixes(ps)
	for {
		// Drop prefixes contained in an earlier one (sorted: address, then
		// shorter first).
		var kept []netip.Prefix
		for _, p := range cur {
			if n := len(kept); n > 0 && kept[n-1].Bits() <= p.Bits() && kept[n-1].Contains(p.Addr()) {
				continue
			}
			kept = append(kept, p)
		}
		merged := false
		var next []netip.Prefix
		for i := 0; i < len(kept); i++ {
			p := kept[i]
			if i+1 < len(kept) && p.Bits() > 0 && kept[i+1].Bits() == p.Bits() {
				parent, _ := p.Addr().Prefix(p.Bits() - 1)
				if parent.Addr() == p.Addr() && parent.Contains(kept[i+1].Addr()) {
					next = append(next, parent)
					i++
					merged = true
					continue
				}
			}
			next = append(next, p)
		}
		if !merged {
			return next
		}
		cur = sortPrefixes(next)
	}
}

func sortPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if p.IsValid() {
			out = append(out, p.Masked())
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	return slices.Compact(out)
}

func sortAddrs(as []netip.Addr) []netip.Addr {
	out := slices.Clone(as)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package lint

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"egret.io/egret/internal/noproxy"
)

// This file is the seam to package noproxy, which holds the per-runtime
// truth about NO_PROXY: the rules ask it which entries a container's
// runtimes ignore or misread and which cluster destinations a value leaves
// to the proxy.

// defaultClients are the NO_PROXY readers assumed for an image whose runtime
// is not recognised: Go programs and shell scripts calling curl.
var defaultClients = []string{"go", "curl"}

// noProxyClients returns the noproxy client models that read NO_PROXY in
// container c, from its runtimes. A JVM-only container reads no NO_PROXY
// (see the jvm-* rules) and gets none.
func noProxyClients(c *container) []string {
	var out []string
	if c.runtimes.has(rtPython) {
		out = append(out, "python-urllib", "python-requests")
	}
	if c.runtimes.has(rtNode) {
		out = append(out, "node-http", "undici-7.22")
	}
	if c.runtimes.has(rtCurl) {
		out = append(out, "curl")
	}
	if len(out) == 0 && !c.runtimes.has(rtJVM) {
		out = defaultClients
	}
	return out
}

func lintOptions(cl Cluster, clients []string) noproxy.LintOptions {
	return noproxy.LintOptions{Clients: clients, ClusterCIDRs: cl.CIDRs, ClusterDomain: cl.Domain, APIServerIPs: cl.APIServerIPs, MetadataAddrs: cl.MetadataAddrs}
}

var varRef = regexp.MustCompile(`^\$\(([A-Za-z_][A-Za-z0-9_]*)\)$`)

// cleanNoProxy prepares a NO_PROXY value for noproxy.Lint: a
// $(KUBERNETES_SERVICE_HOST) entry (expanded by the kubelet to the API server
// address) becomes the API server address when known, other unexpanded
// $(VAR) entries are dropped.
func cleanNoProxy(v string, cl Cluster) string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		t := strings.TrimSpace(e)
		if m := varRef.FindStringSubmatch(t); m != nil {
			if m[1] == "KUBERNETES_SERVICE_HOST" {
				for _, a := range cl.APIServerIPs {
					out = append(out, a.String())
				}
			}
			continue
		}
		out = append(out, e)
	}
	return strings.Join(out, ",")
}

// lintNoProxy runs noproxy.Lint on a NO_PROXY value for the given clients.
func lintNoProxy(v string, cl Cluster, clients []string) []noproxy.Finding {
	return noproxy.Lint(cleanNoProxy(v, cl), lintOptions(cl, clients))
}

// essentialCache memoises essentialEntries (a pure function of its
// arguments), keyed by their printed form.
var essentialCache sync.Map

// essentialEntries returns the entries noproxy recommends for every pod of
// the cluster and these clients: the fixes of the essentials an empty
// NO_PROXY misses. The result must not be modified.
func essentialEntries(cl Cluster, clients []string) []string {
	key := fmt.Sprint(cl.Domain, cl.CIDRs, cl.APIServerIPs, cl.MetadataAddrs == nil, cl.MetadataAddrs, clients)
	if v, ok := essentialCache.Load(key); ok {
		return v.([]string)
	}
	out := computeEssentials(cl, clients)
	essentialCache.Store(key, out)
	return out
}

func computeEssentials(cl Cluster, clients []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range noproxy.Lint("", lintOptions(cl, clients)) {
		if f.Rule != noproxy.RuleMissingEssential {
			continue
		}
		for _, e := range f.Add {
			if !seen[e] {
				seen[e] = true
				out = append(out, e)
			}
		}
	}
	return out
}

// suggestedNoProxy returns a NO_PROXY value that covers the cluster for
// clients.
func suggestedNoProxy(cl Cluster, clients []string) string {
	if len(clients) == 0 {
		clients = defaultClients
	}
	return strings.Join(essentialEntries(cl, clients), ",")
}

// nonProxyHostsFor translates a NO_PROXY value (or a nonProxyHosts value
// written with commas) into the JVM's http.nonProxyHosts form.
func nonProxyHostsFor(v string) string {
	h, _ := noproxy.JavaNonProxyHosts(strings.NewReplacer("|", ",", " ", ",").Replace(v))
	return h
}

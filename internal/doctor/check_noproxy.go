package doctor

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"egret.io/egret/internal/noproxy"
)

var backticked = regexp.MustCompile("`([^`]+)`")

// noProxyCheck lints NO_PROXY for the runtimes in the image: the cluster
// destinations it leaves to the proxy (Service names, the API server by
// name and by KUBERNETES_SERVICE_HOST, the metadata address, loopback) and
// entries that send too much direct.
func (s *state) noProxyCheck() Check {
	return Check{Name: "no-proxy", Run: func(context.Context) Result {
		value, from := s.noProxyValue()
		var r Result
		r.Details = append(r.Details, "runtimes: "+strings.Join(s.clientNames(), ", ")+" ("+s.clientsWhy+")")
		if !s.anyProxySet() {
			r.Status = Pass
			r.Summary = "no proxy variable is set, so NO_PROXY has nothing to exempt"
			return r
		}
		opts := noproxy.LintOptions{Clients: s.clientNames(), ClusterDomain: s.clusterDomain()}
		if a, err := netip.ParseAddr(s.env["KUBERNETES_SERVICE_HOST"]); err == nil {
			opts.APIServerIPs = []netip.Addr{a}
			r.Details = append(r.Details, "API server address from KUBERNETES_SERVICE_HOST: "+a.String())
		}
		if from != "" {
			r.Details = append(r.Details, fmt.Sprintf("%s=%s", from, value))
		}
		var errs, warns, adds []string
		seen := map[string]bool{}
		for _, f := range noproxy.Lint(value, opts) {
			switch f.Rule {
			case noproxy.RuleMissingEssential, noproxy.RuleTooBroad, noproxy.RuleUnreadableEntry, noproxy.RuleSeparator:
			default:
				continue
			}
			line := f.Message
			if f.Fix != "" {
				line += " — fix: " + f.Fix
			}
			switch f.Severity {
			case noproxy.SeverityError:
				errs = append(errs, f.Message)
			case noproxy.SeverityWarning:
				warns = append(warns, f.Message)
			default:
				continue
			}
			r.Details = append(r.Details, line)
			if f.Rule == noproxy.RuleMissingEssential && strings.HasPrefix(f.Fix, "add ") {
				for _, m := range backticked.FindAllStringSubmatch(f.Fix, -1) {
					if !seen[m[1]] {
						seen[m[1]] = true
						adds = append(adds, m[1])
					}
				}
			}
		}
		switch {
		case value == "":
			r.Status = Fail
			r.Summary = "a proxy is set but NO_PROXY is empty: every in-cluster call goes to the proxy"
		case len(errs) > 0:
			r.Status = Fail
			r.Summary = fmt.Sprintf("NO_PROXY misses cluster destinations: %s", errs[0])
			if len(errs) > 1 {
				r.Summary += fmt.Sprintf(" (and %d more)", len(errs)-1)
			}
		case len(warns) > 0:
			r.Status = Warn
			r.Summary = "NO_PROXY covers the cluster, but: " + warns[0]
		default:
			r.Status = Pass
			r.Summary = "NO_PROXY covers Service names, the API server, the metadata address and loopback for " + joinAnd(s.clientNames())
		}
		if len(adds) > 0 {
			r.Advice = "Add " + strings.Join(adds, ",") + " to NO_PROXY and no_proxy (plus your Service and Pod CIDRs for calls by IP)."
		} else if r.Status != Pass {
			r.Advice = "See the details: each line ends with its fix."
		}
		return r
	}}
}

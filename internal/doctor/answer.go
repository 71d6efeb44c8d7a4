package doctor

import (
	"fmt"
	"net/http"
	"strings"

	"egret.io/egret/internal/proxystatus"
)

// proxyError returns the last Proxy-Status member that carries an error
// (the proxy closest to the client appends last).
func proxyError(entries []proxystatus.Entry) (proxystatus.Entry, bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Params["error"] != "" {
			return entries[i], true
		}
	}
	return proxystatus.Entry{}, false
}

// decodeIn is what decoding a proxy's answer needs to know.
type decodeIn struct {
	proxy    string // the proxy, redacted
	source   string // where it comes from: "HTTPS_PROXY, https_proxy" or "--proxy"
	user     string // the user name in the proxy URL, "" when none
	target   string // host:port asked for
	internal bool   // target is inside the cluster (a NO_PROXY hole when proxied)
	noProxy  string // the NO_PROXY entry that would fix an internal target
}

// verdict is a decoded answer.
type verdict struct {
	status  Status
	summary string
	advice  string
	details []string
}

// oneLine shortens a body to its first line.
func oneLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// decodeAnswer says what a proxy's non-2xx answer to a CONNECT (or GET)
// means, and what to do. A 2xx answer passes.
func decodeAnswer(a *answer, in decodeIn) verdict {
	v := verdict{status: Fail}
	v.details = append(v.details, "proxy "+in.proxy+" (from "+in.source+") answered "+a.status+" to "+in.target)
	ps := proxystatus.Parse(a.header.Values("Proxy-Status"))
	if len(ps) > 0 {
		v.details = append(v.details, "Proxy-Status: "+strings.Join(a.header.Values("Proxy-Status"), ", "))
	}
	squid := a.header.Get("X-Squid-Error")
	if squid != "" {
		v.details = append(v.details, "X-Squid-Error: "+squid)
	}
	if b := oneLine(a.body); b != "" && !strings.HasPrefix(strings.ToLower(b), "<!doctype") && !strings.HasPrefix(b, "<") {
		v.details = append(v.details, "body: "+b)
	}
	pe, hasPE := proxyError(ps)
	etype, hop, pdetail := pe.Params["error"], pe.Params["next-hop"], pe.Params["details"]
	if hasPE && pdetail != "" {
		v.details = append(v.details, "the proxy says: "+pdetail)
	}
	who := "the proxy " + in.proxy
	if hasPE && pe.Proxy == "egret" {
		who = "egret at " + in.proxy
	}

	if a.code/100 == 2 {
		v.status = Pass
		v.summary = fmt.Sprintf("%s answered %s to CONNECT %s", in.proxy, a.status, in.target)
		return v
	}

	switch {
	case etype == "upstream_auth_required":
		up := hop
		if up == "" {
			up = "its upstream proxy"
		}
		v.summary = fmt.Sprintf("%s works, but its upstream %s rejected egret's credentials (upstream 407, reported as %d)", who, up, a.code)
		v.advice = "Fix the credentials the egret proxy holds for " + up + " — UPSTREAM_PROXY, PROXY_USER/PROXY_PASS or the mounted " +
			"Secret files — not the app's variables (percent-encode special characters in a URL: @ %40, : %3A, / %2F, # %23). " +
			"A mounted Secret is re-read without a restart."

	case a.code == http.StatusProxyAuthRequired:
		realm := ""
		if pa := a.header.Get("Proxy-Authenticate"); pa != "" {
			realm = " (" + pa + ")"
			v.details = append(v.details, "Proxy-Authenticate: "+pa)
		}
		if in.user != "" {
			v.summary = fmt.Sprintf("%s rejected the credentials of user %q from %s: 407 Proxy Authentication Required%s", who, in.user, in.source, realm)
			v.advice = "Fix the password in " + in.source + " (from its Secret): percent-encode special characters (@ %40, : %3A, / %2F, # %23, % %25); " +
				"or the proxy's user list. Better: keep credentials in an egret sidecar (UPSTREAM_PROXY from a Secret) and point the app at http://127.0.0.1:3128."
		} else {
			v.summary = fmt.Sprintf("%s requires credentials and %s has none: 407 Proxy Authentication Required%s", who, in.source, realm)
			v.advice = "Add user:password@ (percent-encoded, from a Secret with valueFrom) to " + in.source +
				", or run egret as a sidecar that holds the credentials and point the app at http://127.0.0.1:3128."
		}

	case a.code == http.StatusForbidden || etype == "http_request_denied" || etype == "destination_ip_prohibited":
		switch {
		case etype == "http_request_denied":
			v.summary = fmt.Sprintf("%s refuses %s by policy: a deny rule matches it (403 http_request_denied)", who, in.target)
			v.advice = "If " + in.target + " must be reachable, add a route for it before the deny rule in egret's configuration (routes, DENY list); otherwise the app must not call it."
		case etype == "destination_ip_prohibited":
			v.summary = fmt.Sprintf("%s refuses the address %s resolves to (403 destination_ip_prohibited)", who, in.target)
			v.advice = "egret will not connect to that address range; allow the range in egret's configuration if this destination is legitimate."
		case etype == "upstream_refused":
			up := hop
			if up == "" {
				up = "the upstream proxy"
			}
			v.summary = fmt.Sprintf("%s passed the request on, and %s refused %s with 403: its policy or its IP allow-list", who, up, in.target)
			v.advice = "Ask the owners of " + up + " to allow " + in.target + " and the address egret connects from (the gateway's or node's egress IP)."
		case squid == "ERR_ACCESS_DENIED" || strings.HasPrefix(squid, "ERR_ACCESS_DENIED"):
			v.summary = fmt.Sprintf("%s (Squid) denies %s by its http_access rules: policy or IP allow-list", who, in.target)
			v.advice = "Allow " + in.target + " (and the source address this traffic arrives from) in the proxy's ACLs, or use the proxy this destination is meant to go through."
		default:
			v.summary = fmt.Sprintf("%s refuses %s (403 Forbidden): policy or IP allow-list", who, in.target)
			v.advice = "Ask the proxy's owners to allow " + in.target + " and the source address this pod's traffic arrives from (the gateway's or node's egress IP)."
		}

	case a.code >= 500 && in.internal:
		v.summary = fmt.Sprintf("NO_PROXY hole: %s is inside the cluster, but sent to %s, which answered %s%s", in.target, in.proxy, a.status, psSuffix(etype))
		v.advice = "Add " + orDefault(in.noProxy, "the name's suffix (.svc, .cluster.local)") + " to NO_PROXY and no_proxy so clients reach it directly; an outside proxy cannot resolve or reach cluster names and addresses."

	case etype == "pool_unavailable":
		v.summary = fmt.Sprintf("%s has no upstream proxy left to try for %s (%s pool_unavailable)", who, in.target, a.status)
		v.advice = "Check egret's upstream pool members: reachable from egret, credentials, and their health (egret's /status.json and logs name the failing member)."

	case etype == "upstream_refused":
		up := hop
		if up == "" {
			up = "the upstream proxy"
		}
		v.summary = fmt.Sprintf("%s passed the request on, and %s answered %s for %s", who, up, a.status, in.target)
		v.advice = "Look at " + up + ": it cannot reach " + in.target + " or is failing."

	case etype == "destination_not_found" || etype == "dns_error" || etype == "dns_timeout" || strings.HasPrefix(squid, "ERR_DNS_FAIL"):
		v.summary = fmt.Sprintf("dead target: %s cannot resolve %s (%s%s)", who, hostOnly(in.target), a.status, psSuffix(firstNonEmpty(etype, squid)))
		v.advice = "Check the name " + hostOnly(in.target) + ". If it exists only inside the cluster, add it (or its suffix) to NO_PROXY: the proxy resolves names outside the cluster."

	case etype == "connection_refused" || (strings.HasPrefix(squid, "ERR_CONNECT_FAIL") && strings.Contains(string(a.body), "(111)")):
		v.summary = fmt.Sprintf("dead target: %s reached %s's address, but nothing listens there (%s connection refused)", who, in.target, a.status)
		v.advice = "The destination is down or the port is wrong: check " + in.target + " itself; the proxy path works."

	case etype == "connection_timeout" || etype == "destination_ip_unroutable" || a.code == http.StatusGatewayTimeout || strings.HasPrefix(squid, "ERR_CONNECT_FAIL") || strings.HasPrefix(squid, "ERR_READ_TIMEOUT"):
		v.summary = fmt.Sprintf("dead target: %s cannot connect to %s (%s%s)", who, in.target, a.status, psSuffix(firstNonEmpty(etype, squid)))
		v.advice = "The destination does not answer the proxy: it is down, or a firewall between the proxy and " + in.target + " drops the traffic (allow-list the proxy's egress IP there)."

	case etype == "connection_limit_reached":
		v.summary = fmt.Sprintf("%s is at a connection limit for %s (%s)", who, in.target, a.status)
		v.advice = "Raise egret's per-destination or per-client limits, or reduce the load."

	case a.code >= 500:
		v.summary = fmt.Sprintf("%s answered %s for %s%s", who, a.status, in.target, psSuffix(etype))
		v.advice = "The proxy could not serve " + in.target + ": its logs say why. If " + in.target + " is a cluster destination, add it to NO_PROXY."

	case a.code == http.StatusBadRequest || a.code == http.StatusMethodNotAllowed || a.code == http.StatusNotImplemented || a.code == http.StatusNotFound:
		v.summary = fmt.Sprintf("%s speaks HTTP but refuses CONNECT (%s): not a forward proxy, or the wrong port", in.proxy, a.status)
		v.advice = "Check the port in " + in.source + ": it must be the proxy's port (egret: 3128), not an application or admin port."

	default:
		v.summary = fmt.Sprintf("%s answered %s to CONNECT %s", in.proxy, a.status, in.target)
		v.advice = "Unexpected answer for a forward proxy; check " + in.source + "."
	}
	return v
}

// decodeProxyFailure says what a failure to talk to the proxy means.
func decodeProxyFailure(f *failure, in decodeIn) verdict {
	v := verdict{status: Fail, details: []string{f.Error()}}
	switch f.kind {
	case fkNotFound, fkDNS, fkDNSTimeout:
		v.summary = fmt.Sprintf("the proxy %s (from %s) cannot be resolved: %s", in.proxy, in.source, f.what())
		v.advice = "Fix the proxy host in " + in.source + " (a Service is <name>.<namespace>[.svc]), or let DNS through (see the dns checks)."
	case fkRefused:
		v.summary = fmt.Sprintf("connection to the proxy %s refused: nothing listens on that port, or a NetworkPolicy rejects it", in.proxy)
		v.advice = "Check the port in " + in.source + " and that the proxy runs and is ready (sidecar: `egret proxy` on 127.0.0.1:3128; gateway: its Service has endpoints); then the NetworkPolicy egress rules of this pod."
	case fkTimeout:
		v.summary = fmt.Sprintf("no answer from the proxy %s (timeout): a route or a NetworkPolicy drops the traffic", in.proxy)
		v.advice = "Allow egress from this pod to the proxy in its NetworkPolicy (and ingress at the gateway), and check the route to " + in.proxy + "; a black-holed or wrong address also looks like this."
	case fkUnreachable:
		v.summary = fmt.Sprintf("no route to the proxy %s: %s", in.proxy, shortErr(f.err))
		v.advice = "The address in " + in.source + " is not reachable from this pod's network: check the address and the pod's routes."
	case fkReset, fkProtocol:
		v.summary = fmt.Sprintf("the proxy %s closed the connection or answered something that is not HTTP: %s", in.proxy, shortErr(f.err))
		v.advice = "Check that " + in.source + " names an HTTP proxy port (https:// if the proxy expects TLS)."
	case fkTLS:
		v.summary = fmt.Sprintf("TLS with the proxy %s failed: %s", in.proxy, shortErr(f.err))
		v.advice = "An https:// proxy needs a certificate this pod trusts; use http:// if the proxy does not speak TLS."
	case fkUnsupported:
		v.status = Warn
		v.summary = fmt.Sprintf("the proxy %s is not tested: %s", in.proxy, shortErr(f.err))
	default:
		v.summary = fmt.Sprintf("talking to the proxy %s failed: %s", in.proxy, shortErr(f.err))
		v.advice = "Check " + in.source + "."
	}
	return v
}

func psSuffix(t string) string {
	if t == "" {
		return ""
	}
	return ", " + t
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func firstNonEmpty(xs ...string) string {
	for _, x := range xs {
		if x != "" {
			return x
		}
	}
	return ""
}

// hostOnly strips the port from host:port.
func hostOnly(hp string) string {
	if i := strings.LastIndex(hp, ":"); i > 0 && !strings.HasSuffix(hp, "]") {
		h := hp[:i]
		return strings.Trim(h, "[]")
	}
	return strings.Trim(hp, "[]")
}

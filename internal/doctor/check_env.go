package doctor

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"egret.io/egret/internal/noproxy"
)

// envPairs are the proxy variables, upper case first.
var envPairs = [][2]string{{"HTTP_PROXY", "http_proxy"}, {"HTTPS_PROXY", "https_proxy"}, {"NO_PROXY", "no_proxy"}, {"ALL_PROXY", "all_proxy"}}

// passwordProp matches -D...password=VALUE in JVM options.
var passwordProp = regexp.MustCompile(`(?i)(-D[\w.-]*pass(word)?=)("[^"]*"|'[^']*'|\S+)`)

// showValue prints a variable for a report: redacted, quoted, or "(unset)".
func showValue(env noproxy.Env, name string) string {
	v, ok := env[name]
	if !ok {
		return "(unset)"
	}
	if v == "" {
		return `""`
	}
	l := strings.ToLower(name)
	switch {
	case strings.Contains(l, "proxy") && !strings.Contains(l, "no_proxy"):
		return redact(v)
	case strings.Contains(l, "java") || strings.Contains(l, "node_options"):
		return passwordProp.ReplaceAllString(v, "${1}xxxxx")
	}
	return v
}

// envCheck reports the proxy variables in both cases.
func (s *state) envCheck() Check {
	return Check{Name: "env", Target: "", Run: func(context.Context) Result {
		var r Result
		for _, p := range envPairs {
			r.Details = append(r.Details, fmt.Sprintf("%s=%s  %s=%s", p[0], showValue(s.env, p[0]), p[1], showValue(s.env, p[1])))
		}
		for _, n := range []string{"NODE_USE_ENV_PROXY", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"} {
			if _, ok := s.env[n]; ok {
				r.Details = append(r.Details, n+"="+showValue(s.env, n))
			}
		}
		if s.proxyFlag != nil {
			r.Details = append(r.Details, "--proxy "+redactURL(s.proxyFlag)+" replaces the environment's proxy in the proxy and egress-ip checks")
		}
		if !s.anyProxySet() {
			r.Status = Warn
			r.Summary = "no proxy variable is set: every client goes direct"
			r.Advice = "Expected only with transparent interception (egret iptables) or when this pod is meant to reach the outside directly. " +
				"Otherwise set HTTP_PROXY, HTTPS_PROXY and NO_PROXY in both cases."
			return r
		}
		var fails, warns, advice []string
		for _, p := range envPairs {
			up, lo := p[0], p[1]
			uv, uset := s.env[up]
			lv, lset := s.env[lo]
			same := uv == lv
			if up == "NO_PROXY" {
				same = noproxy.Normalize(uv) == noproxy.Normalize(lv)
			}
			switch {
			case uset && lset && !same:
				fails = append(fails, fmt.Sprintf("%s and %s differ", up, lo))
				advice = append(advice, fmt.Sprintf("set %s and %s to the same value (Go, reqwest and global-agent read %s; curl, wget, Python, Node, Ruby and .NET read %s)", up, lo, up, lo))
			case uset != lset && p[0] != "ALL_PROXY":
				set, missing := up, lo
				if lset {
					set, missing = lo, up
				}
				who := map[string]string{
					"http_proxy":  "curl and wget ignore upper-case HTTP_PROXY",
					"https_proxy": "wget reads only the lower-case name",
					"no_proxy":    "wget reads only the lower-case name",
					"HTTP_PROXY":  "global-agent reads only upper case",
					"HTTPS_PROXY": "global-agent reads only upper case",
					"NO_PROXY":    "global-agent reads only upper case",
				}[missing]
				warns = append(warns, fmt.Sprintf("only %s is set (%s)", set, who))
				advice = append(advice, fmt.Sprintf("set %s to the same value as %s", missing, set))
			}
		}
		np, _ := s.noProxyValue()
		if np == "" {
			fails = append(fails, "a proxy is set but NO_PROXY is empty")
			advice = append(advice, "set NO_PROXY and no_proxy (the no-proxy check lists the entries)")
		}
		switch {
		case len(fails) > 0:
			r.Status = Fail
			r.Summary = strings.Join(append(fails, warns...), "; ")
		case len(warns) > 0:
			r.Status = Warn
			r.Summary = strings.Join(warns, "; ")
		default:
			r.Status = Pass
			r.Summary = "proxy variables set in both cases, and the cases agree"
		}
		if len(advice) > 0 {
			r.Advice = strings.ToUpper(advice[0][:1]) + strings.Join(advice, "; ")[1:] + "."
		}
		return r
	}}
}

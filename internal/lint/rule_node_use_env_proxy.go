package lint

import "strings"

const idNodeEnvProxy = "node-use-env-proxy"

var ruleNodeEnvProxy = Rule{
	ID:       idNodeEnvProxy,
	Severity: Warning,
	Summary:  "a Node.js container has proxy variables but no NODE_USE_ENV_PROXY",
	Help: "Node.js's `http`, `https` and `fetch` ignore HTTP_PROXY/HTTPS_PROXY/NO_PROXY unless " +
		"`NODE_USE_ENV_PROXY=1` (or `--use-env-proxy`) is given (Node 24.5+ and 22.21+; fetch from 24.0). Older " +
		"Node versions ignore the variables entirely. Set `NODE_USE_ENV_PROXY=1`, or make sure the application " +
		"uses a proxy-aware agent (undici EnvHttpProxyAgent, axios, global-agent).",
	pod: checkNodeEnvProxy,
}

func checkNodeEnvProxy(p *pod) {
	for _, c := range p.clients() {
		if !c.runtimes.has(rtNode) || c.env.opaque {
			continue
		}
		vars := setProxyVars(c.env)
		if len(vars) == 0 {
			continue
		}
		if v := c.env.get("NODE_USE_ENV_PROXY"); v != nil && (!v.known || v.value == "1" || strings.EqualFold(v.value, "true")) {
			continue
		}
		if v := c.env.get("NODE_OPTIONS"); v != nil && (!v.known || strings.Contains(v.value, "--use-env-proxy")) {
			continue
		}
		if hasWord(c.c.Command, "--use-env-proxy") || hasWord(c.c.Args, "--use-env-proxy") {
			continue
		}
		p.report(idNodeEnvProxy, Warning, c, vars[0].field,
			"Node.js ignores %s unless NODE_USE_ENV_PROXY=1 is set: add NODE_USE_ENV_PROXY=1 (Node 24.5+ / 22.21+) or use a proxy-aware agent", names(vars))
	}
}

func hasWord(words []string, w string) bool {
	for _, s := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

package lint

import (
	"strconv"
	"strings"
)

const idConfigFileNoProxy = "config-file-no-proxy-mismatch"

var ruleConfigFileNoProxy = Rule{
	ID:       idConfigFileNoProxy,
	Severity: Warning,
	Summary:  "a mounted tool configuration file has its own proxy exceptions that lack the environment's NO_PROXY entries",
	Help: "Maven (nonProxyHosts), apt (Acquire::http::Proxy::HOST \"DIRECT\"), npm (noproxy) and agents with their " +
		"own no_proxy list take their exceptions only from the file once it sets them: NO_PROXY is not read. " +
		"Every cluster destination missing from the file's list is sent to the proxy, which cannot reach it (502). " +
		"Copy the environment's NO_PROXY entries into the file's list (Maven: `|`-separated, `*.svc` for `.svc`).",
	pod: checkConfigFileNoProxy,
}

// exceptionKey normalises an exception entry for comparison: lower case,
// no "*." or "." prefix, no brackets.
func exceptionKey(e string) string {
	e = strings.ToLower(strings.TrimSpace(e))
	e = strings.TrimPrefix(e, "*")
	e = strings.TrimPrefix(e, ".")
	return strings.Trim(e, "[]")
}

func checkConfigFileNoProxy(p *pod) {
	for _, c := range p.clients() {
		np := c.env.get(noProxy.upper)
		if np == nil || !np.known {
			np = c.env.get(noProxy.lower)
		}
		if np == nil || !np.known || strings.TrimSpace(np.value) == "" {
			continue
		}
		for _, m := range p.mountedConfigs(c) {
			if m.err != nil || !m.cfg.ownNoProxy || !m.cfg.sets() {
				continue
			}
			have := map[string]bool{}
			for _, e := range m.cfg.noProxy {
				have[exceptionKey(e)] = true
			}
			var missing []string
			for _, e := range splitList(np.value) {
				if k := exceptionKey(e); k != "" && !have[k] {
					missing = append(missing, e)
				}
			}
			if len(missing) == 0 {
				continue
			}
			shown := missing
			more := ""
			if len(shown) > 6 {
				shown, more = shown[:6], " (and "+strconv.Itoa(len(missing)-6)+" more)"
			}
			list := "exception list"
			if m.cfg.tool == "Maven" {
				list = "nonProxyHosts"
			}
			p.report(idConfigFileNoProxy, Warning, c, m.field, "%s: %s's %s lacks %s%s from %s: %s reads only the file's exceptions, so it sends these to the proxy; add them to the file",
				m.where(), m.cfg.tool, list, strings.Join(shown, ", "), more, np.name, m.cfg.tool)
		}
	}
}

package lint

import (
	"net/netip"
	"strings"

	"egret.io/egret/internal/noproxy"
)

const idContainerdMirror = "containerd-mirror-via-proxy"

var ruleContainerdMirror = Rule{
	ID:       idContainerdMirror,
	Severity: Warning,
	Summary:  "a mounted containerd hosts.toml names a registry mirror that the environment's proxy would carry",
	Help: "containerd dials the mirrors of hosts.toml with the proxy of its own environment (the systemd drop-in " +
		"`egret node render` writes from the same settings). A mirror inside the network that NO_PROXY does not " +
		"cover is pulled through the proxy, which cannot reach it: ImagePullBackOff with a healthy mirror. Add the " +
		"mirror's host to NO_PROXY (and to the node's drop-in).",
	pod: checkContainerdMirror,
}

func checkContainerdMirror(p *pod) {
	for _, c := range p.clients() {
		if len(setProxyVars(c.env)) == 0 {
			continue
		}
		env := noproxy.Env{}
		for _, n := range c.env.order {
			if v := c.env.get(n); v.known {
				env[n] = v.value
			}
		}
		goModel, _ := noproxy.SelectClients([]string{"go"})
		for _, m := range p.mountedConfigs(c) {
			if m.err != nil || m.cfg.tool != "containerd" {
				continue
			}
			for _, mirror := range m.cfg.mirrors {
				u := mirror
				if !strings.Contains(u, "://") {
					u = "https://" + u
				}
				if !looksInternal(hostOf(u)) {
					continue // a public registry through the proxy is the point
				}
				rs, err := noproxy.Explain(u, env, goModel)
				if err != nil || len(rs) == 0 || rs[0].Decision != noproxy.DecisionProxy {
					continue
				}
				p.report(idContainerdMirror, Warning, c, m.field, "%s names the registry %s, which containerd would reach through %s with these settings (%s): it looks internal: add %s to NO_PROXY (and the node's drop-in)",
					m.where(), mirror, rs[0].Proxy, rs[0].Reason, hostOf(u))
			}
		}
	}
}

// internalSuffixes are name endings used inside networks, never on the
// public internet.
var internalSuffixes = []string{".svc", ".cluster.local", ".local", ".internal", ".lan", ".corp", ".home.arpa", ".intranet"}

// looksInternal reports whether a registry host is inside the network: a
// non-global address, a single-label name or an internal name ending.
func looksInternal(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		return a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast()
	}
	if !strings.Contains(host, ".") {
		return true
	}
	for _, s := range internalSuffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

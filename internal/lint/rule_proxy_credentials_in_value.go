package lint

import "strings"

const idCredentialsInValue = "proxy-credentials-in-value"

var ruleCredentialsInValue = Rule{
	ID:       idCredentialsInValue,
	Severity: Error,
	Summary:  "proxy credentials written as a plain value or kept in a ConfigMap",
	Help: "A proxy password in an env `value` (or a ConfigMap) is visible to anyone who can read the " +
		"workload: `kubectl describe`, audit logs, GitOps repositories. Put the whole proxy URL (or PROXY_PASS) " +
		"in a Secret and reference it with `valueFrom.secretKeyRef` or `envFrom.secretRef`.",
	pod: checkCredentialsInValue,
}

// passwordVars hold a proxy password on their own.
var passwordVars = map[string]bool{"PROXY_PASS": true, "PROXY_PASSWORD": true, "HTTP_PROXY_PASSWORD": true, "HTTPS_PROXY_PASSWORD": true}

// passwordProps are JVM system properties that hold a proxy password.
var passwordProps = []string{"http.proxyPassword", "https.proxyPassword", "java.net.socks.password"}

func checkCredentialsInValue(p *pod) {
	for _, c := range p.containers {
		for _, name := range c.env.order {
			v := c.env.get(name)
			if !v.known || (v.origin != fromValue && v.origin != fromConfigMap) || strings.TrimSpace(v.value) == "" || (v.origin == fromValue && strings.TrimSpace(v.raw) == "") {
				continue
			}
			where, val := "as a plain value", v.raw
			if v.origin == fromConfigMap {
				where, val = "in "+v.source, v.value
			}
			switch {
			case passwordVars[strings.ToUpper(name)]:
				p.report(idCredentialsInValue, Error, c, v.field,
					"%s is set %s: move the password to a Secret and use valueFrom.secretKeyRef", name, where)
			case isURLVar(name) && parseProxyURL(val).password:
				p.report(idCredentialsInValue, Error, c, v.field,
					"%s carries a user name and password %s: move the whole URL to a Secret and use valueFrom.secretKeyRef", name, where)
			case isJavaOptionsVar(name):
				for _, prop := range passwordProps {
					if _, ok := javaProps(val)[prop]; ok {
						p.report(idCredentialsInValue, Error, c, v.field,
							"%s sets -D%s %s: pass the password from a Secret (e.g. a second variable from valueFrom.secretKeyRef expanded with $(NAME))", name, prop, where)
					}
				}
			}
		}
	}
}

// isURLVar reports whether a variable of this name holds a proxy URL.
func isURLVar(name string) bool {
	n := strings.ToUpper(name)
	return strings.HasSuffix(n, "_PROXY") && n != "NO_PROXY" && n != "NODE_USE_ENV_PROXY" || n == "PROXY_URL" || n == "UPSTREAM_PROXY"
}

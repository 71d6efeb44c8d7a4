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
			where := "as a plain value"
			if v.origin == fromConfigMap {
				where = "in " + v.source
			}
			switch {
			case passwordVars[strings.ToUpper(name)]:
				if w, ok := plainIn(v, 0, len(v.value)); ok {
					p.report(idCredentialsInValue, Error, c, v.field,
						"%s is set %s: move the password to a Secret and use valueFrom.secretKeyRef", name, w)
				}
			case isURLVar(name) && parseProxyURL(v.value).password:
				// Judge the expanded value: a password made of $(VAR)
				// references to Secret variables is not a plain value.
				_, end, pass, _ := userinfoSpan(v.value)
				if w, ok := plainIn(v, pass, end); ok {
					p.report(idCredentialsInValue, Error, c, v.field,
						"%s carries a user name and password %s: move the whole URL (or the password, as $(PROXY_PASS) from valueFrom.secretKeyRef) to a Secret%s", name, w, unexpanded(v, pass, end))
				}
			case isJavaOptionsVar(name):
				val := v.raw
				if v.origin == fromConfigMap {
					val = v.value
				}
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

// unexpanded notes the $(NAME) references in bytes [start, end) of v's
// value that the kubelet leaves as written (NAME is not set before v).
func unexpanded(v *envVar, start, end int) string {
	var refs []string
	s := v.value[:end]
	for i := start; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) || s[i+1] != '(' {
			continue
		}
		j := strings.IndexByte(s[i:], ')')
		if j < 0 {
			break
		}
		if from, literal := v.sourceOf(i); literal && from == v {
			refs = append(refs, s[i:i+j+1])
		}
		i += j
	}
	if len(refs) == 0 {
		return ""
	}
	return " (" + strings.Join(refs, ", ") + " stays as written: the kubelet expands only variables set earlier in the container)"
}

// plainIn reports whether bytes [start, end) of v's value - a password -
// are visible in the workload or a ConfigMap: written in v's own value, or
// taken from a ConfigMap. Bytes written in another variable's value are
// reported on that variable, bytes from a Secret (or unknown) are fine.
func plainIn(v *envVar, start, end int) (string, bool) {
	for i := start; i < end; i++ {
		from, literal := v.sourceOf(i)
		switch {
		case literal && from == v:
			return "as a plain value", true
		case !literal && from.origin == fromConfigMap:
			if from == v {
				return "in " + v.source, true
			}
			return "from " + from.name + " in " + from.source, true
		}
	}
	return "", false
}

// isURLVar reports whether a variable of this name holds a proxy URL.
func isURLVar(name string) bool {
	n := strings.ToUpper(name)
	return strings.HasSuffix(n, "_PROXY") && n != "NO_PROXY" && n != "NODE_USE_ENV_PROXY" || n == "PROXY_URL" || n == "UPSTREAM_PROXY"
}

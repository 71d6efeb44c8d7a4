package lint

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// checkData judges the ConfigMaps and Secrets of the input on their own: a
// proxy URL kept there is checked even when no workload in the input uses
// it (whatever takes it with envFrom gets it as is). Keys a workload of the
// input does use are left to the pod rules, which report them on the
// workload's environment.
func (c *check) checkData() {
	used := c.usedData()
	for _, d := range c.data {
		ns := d.obj.Namespace
		ref := d.kind + " " + qualify(ns, d.obj.Name)
		if used[ref] {
			continue
		}
		ignore := map[string]bool{}
		for _, id := range strings.Split(d.ann[IgnoreAnnotation], ",") {
			ignore[strings.TrimSpace(id)] = true
		}
		report := func(id string, sev Severity, key, format string, args ...any) {
			if !ignore[id] {
				c.report(id, sev, d.obj, d.field[key], format, args...)
			}
		}
		for _, k := range sortedKeys(d.data) {
			if used[ref+" key "+k] {
				continue
			}
			v := strings.TrimSpace(d.data[k])
			norm := strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(k))
			switch {
			case passwordVars[norm] && d.kind == "ConfigMap" && v != "":
				report(idCredentialsInValue, Error, k, "%s key %s holds a proxy password: ConfigMaps are readable by anyone who can read the namespace; move it to a Secret", ref, k)
				continue
			case !holdsProxyURL(d, norm, v):
				continue
			}
			u := parseProxyURL(v)
			if len(badUserinfoBytes(v)) > 0 {
				report(idURLUnencoded, Error, k, "%s key %s holds a proxy URL whose user information has characters that must be percent-encoded: write @ as %%40, / as %%2F, # as %%23, %% as %%25, ? as %%3F, space as %%20", ref, k)
			}
			if u.password && d.kind == "ConfigMap" {
				report(idCredentialsInValue, Error, k, "%s key %s holds a proxy URL with a user name and password: ConfigMaps are readable by anyone who can read the namespace; move it to a Secret", ref, k)
			}
			if cleartextCredentials(v) {
				report(idCredentialsCleartext, Warning, k, "%s key %s sends the proxy user name and password in clear text (http:// to %s): use https:// to the proxy, or keep the credentials in egret's sidecar or gateway", ref, k, u.host)
			}
		}
		for _, pr := range []varPair{httpProxy, httpsProxy, allProxy, noProxy} {
			up, okU := d.data[pr.upper]
			lo, okL := d.data[pr.lower]
			if !okU || !okL || used[ref+" key "+pr.upper] || used[ref+" key "+pr.lower] {
				continue
			}
			if a, b := strings.TrimSpace(up), strings.TrimSpace(lo); a != b {
				what := "(" + redact(a) + ") and " + pr.lower + " (" + redact(b) + ")"
				if pr == noProxy {
					what = "and " + pr.lower
				}
				report(idCaseMismatch, Error, pr.lower, "%s keys %s %s differ: a workload that takes it with envFrom gets both, and Go uses the upper case while curl, Python and Node use the lower case; give both the same value", ref, pr.upper, what)
			}
		}
	}
}

// holdsProxyURL reports whether key (normalized: upper case, '-' and '.' as
// '_') of d holds a proxy URL: a proxy variable's name, or a key or object
// name about a proxy with a URL value.
func holdsProxyURL(d *dataObject, norm, v string) bool {
	if v == "" || norm == "NO_PROXY" {
		return false
	}
	if isURLVar(norm) {
		return true
	}
	about := strings.Contains(norm, "PROXY") || strings.Contains(strings.ToLower(d.obj.Name), "proxy")
	switch parseProxyURL(v).scheme {
	case "http", "https", "socks5", "socks5h", "socks4", "socks4a":
		return about
	}
	return false
}

// usedData lists what the workloads of the input take from ConfigMaps and
// Secrets: "Secret ns/name" for envFrom (every key), "Secret ns/name key K"
// for valueFrom.
func (c *check) usedData() map[string]bool {
	used := map[string]bool{}
	for _, w := range c.workloads {
		ns := w.ref.Namespace
		for _, list := range [][]corev1.Container{w.spec.InitContainers, w.spec.Containers} {
			for _, ct := range list {
				for _, src := range ct.EnvFrom {
					if src.ConfigMapRef != nil {
						used["ConfigMap "+qualify(ns, src.ConfigMapRef.Name)] = true
					}
					if src.SecretRef != nil {
						used["Secret "+qualify(ns, src.SecretRef.Name)] = true
					}
				}
				for _, e := range ct.Env {
					if e.ValueFrom == nil {
						continue
					}
					if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
						used["ConfigMap "+qualify(ns, r.Name)+" key "+r.Key] = true
					}
					if r := e.ValueFrom.SecretKeyRef; r != nil {
						used["Secret "+qualify(ns, r.Name)+" key "+r.Key] = true
					}
				}
			}
		}
	}
	return used
}

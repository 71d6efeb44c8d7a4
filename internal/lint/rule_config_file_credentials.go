package lint

import "strings"

const idConfigFileCredentials = "config-file-proxy-credentials"

var ruleConfigFileCredentials = Rule{
	ID:       idConfigFileCredentials,
	Severity: Error,
	Summary:  "a tool configuration file in a ConfigMap holds a proxy password",
	Help: "settings.xml's <password>, a proxy URL with user:password in .npmrc, pip.conf, apt.conf, gitconfig or an " +
		"agent's YAML: kept in a ConfigMap, the password is readable by anyone who can read the namespace's " +
		"ConfigMaps and shows in `kubectl describe`. Keep the file in a Secret (mounted the same way), or let " +
		"egret's sidecar or gateway hold the upstream credentials so the file names a proxy without any.",
	set: checkConfigFileCredentials,
}

func checkConfigFileCredentials(c *check) {
	for _, d := range c.data {
		if d.kind != "ConfigMap" {
			continue
		}
		if strings.Contains(d.ann[IgnoreAnnotation], idConfigFileCredentials) {
			continue
		}
		for _, k := range sortedKeys(d.data) {
			kind, ok := cfgKindOf("/" + k)
			if !ok {
				continue
			}
			cfg, err := parseCfg(kind, d.data[k])
			if err != nil || !cfg.password {
				continue
			}
			c.report(idConfigFileCredentials, Error, d.obj, d.field[k], "ConfigMap %s key %s is %s's configuration with a proxy password: ConfigMaps are readable by anyone who can read the namespace; keep the file in a Secret",
				qualify(d.obj.Namespace, d.obj.Name), k, cfg.tool)
		}
	}
}

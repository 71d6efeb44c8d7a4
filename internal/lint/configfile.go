package lint

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"net"
	"path"
	"regexp"
	"sort"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// A tool's own configuration file can carry proxy settings the pod's
// environment does not show: Maven's settings.xml (Maven ignores the
// variables), .npmrc, pip.conf, apt.conf, gitconfig's http.proxy,
// containerd's hosts.toml mirrors and agents' YAML (proxy_url). The config
// file rules (rule_config_file_*.go, rule_maven_settings_proxy.go,
// rule_containerd_mirror_proxy.go) find such files where a container
// mounts a ConfigMap or Secret of the input, read them here, and compare
// them with the container's environment.

// cfgKind is the format of a tool's configuration file.
type cfgKind int

const (
	cfgMaven cfgKind = iota + 1
	cfgNpm
	cfgPip
	cfgApt
	cfgGit
	cfgContainerd
	cfgAgent
)

// cfgKindOf recognises a configuration file by its path in the container.
func cfgKindOf(file string) (cfgKind, bool) {
	base := path.Base(file)
	switch {
	case base == "settings.xml":
		return cfgMaven, true
	case base == ".npmrc" || base == "npmrc":
		return cfgNpm, true
	case base == "pip.conf" || base == "pip.ini":
		return cfgPip, true
	case base == "apt.conf" || strings.Contains(file, "/apt.conf.d/"):
		return cfgApt, true
	case base == ".gitconfig" || base == "gitconfig" || strings.HasSuffix(file, "/git/config"):
		return cfgGit, true
	case base == "hosts.toml":
		return cfgContainerd, true
	case strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml"):
		return cfgAgent, true
	}
	return 0, false
}

// cfgProxy is what a configuration file says about proxies.
type cfgProxy struct {
	tool string // "Maven", "npm", "pip", "apt", "git", "containerd", "the agent"
	// proxies are the proxy URLs the file sets, by what they serve
	// ("http", "https", "all"); "" for "explicitly none" (apt's DIRECT,
	// an empty http.proxy).
	proxies map[string]string
	// noProxy is the file's own exception list, as NO_PROXY-like entries;
	// nil when the file has none.
	noProxy []string
	// ownNoProxy: the tool takes its exceptions only from the file when it
	// uses the file's proxy (the variables' NO_PROXY is not read then).
	ownNoProxy bool
	// password: a proxy password is written in the file.
	password bool
	// mirrors are containerd's registry hosts (server and [host."..."]).
	mirrors []string
}

// sets reports whether the file sets any proxy.
func (c cfgProxy) sets() bool {
	for _, v := range c.proxies {
		if v != "" {
			return true
		}
	}
	return false
}

// parseCfg reads data as kind. An agent YAML without proxy keys, or a file
// without proxy settings, gives a cfgProxy that sets nothing.
func parseCfg(kind cfgKind, data string) (cfgProxy, error) {
	switch kind {
	case cfgMaven:
		return parseMaven(data)
	case cfgNpm:
		return parseNpmrc(data), nil
	case cfgPip:
		return parsePipConf(data), nil
	case cfgApt:
		return parseAptConf(data), nil
	case cfgGit:
		return parseGitconfig(data), nil
	case cfgContainerd:
		return parseHostsTOML(data)
	case cfgAgent:
		return parseAgentYAML(data)
	}
	return cfgProxy{}, fmt.Errorf("unknown configuration file kind %d", kind)
}

// parseMaven reads settings.xml's active <proxies>: Maven uses the first
// active proxy per protocol; nonProxyHosts is "|"-separated with "*"
// wildcards. Maven never reads the proxy variables.
func parseMaven(data string) (cfgProxy, error) {
	var s struct {
		Proxies []struct {
			Active        string `xml:"active"`
			Protocol      string `xml:"protocol"`
			Host          string `xml:"host"`
			Port          string `xml:"port"`
			Username      string `xml:"username"`
			Password      string `xml:"password"`
			NonProxyHosts string `xml:"nonProxyHosts"`
		} `xml:"proxies>proxy"`
	}
	if err := xml.Unmarshal([]byte(data), &s); err != nil {
		return cfgProxy{}, fmt.Errorf("settings.xml: %v", err)
	}
	c := cfgProxy{tool: "Maven", proxies: map[string]string{}, ownNoProxy: true}
	for _, p := range s.Proxies {
		if strings.TrimSpace(p.Active) == "false" || strings.TrimSpace(p.Host) == "" {
			continue
		}
		proto := strings.ToLower(strings.TrimSpace(p.Protocol))
		if proto == "" {
			proto = "http"
		}
		if _, done := c.proxies[proto]; done {
			continue
		}
		port := strings.TrimSpace(p.Port)
		if port == "" {
			port = "8080"
		}
		c.proxies[proto] = "http://" + net.JoinHostPort(strings.TrimSpace(p.Host), port)
		if strings.TrimSpace(p.Password) != "" {
			c.password = true
		}
		if c.noProxy == nil && strings.TrimSpace(p.NonProxyHosts) != "" {
			for _, e := range strings.FieldsFunc(p.NonProxyHosts, func(r rune) bool { return r == '|' || r == ',' }) {
				c.noProxy = append(c.noProxy, strings.TrimSpace(e))
			}
		}
	}
	if c.noProxy == nil && c.sets() {
		c.noProxy = []string{}
	}
	return c, nil
}

// iniLines yields key = value pairs of an ini-like file with the section
// ("" before the first) they are in; comments (# and ;) are skipped.
func iniLines(data string, fn func(section, key, value string)) {
	section := ""
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		if l[0] == '[' && strings.HasSuffix(l, "]") {
			section = strings.TrimSpace(l[1 : len(l)-1])
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
			v = v[1 : len(v)-1]
		}
		fn(section, strings.ToLower(strings.TrimSpace(k)), v)
	}
}

// parseNpmrc reads npm's proxy, https-proxy and noproxy settings (npm's
// noproxy defaults to NO_PROXY; set in the file, it replaces it).
func parseNpmrc(data string) cfgProxy {
	c := cfgProxy{tool: "npm", proxies: map[string]string{}}
	iniLines(data, func(_, k, v string) {
		switch k {
		case "proxy", "http-proxy":
			c.proxies["http"] = v
		case "https-proxy":
			c.proxies["https"] = v
		case "noproxy", "no-proxy":
			c.ownNoProxy = true
			c.noProxy = splitList(v)
		}
	})
	c.password = anyPassword(c.proxies)
	return c
}

// parsePipConf reads pip's proxy (pip passes it to requests, which still
// honours NO_PROXY from the environment).
func parsePipConf(data string) cfgProxy {
	c := cfgProxy{tool: "pip", proxies: map[string]string{}}
	iniLines(data, func(section, k, v string) {
		if k == "proxy" && (section == "global" || section == "install" || section == "download") {
			c.proxies["all"] = v
		}
	})
	c.password = anyPassword(c.proxies)
	return c
}

// aptProxy matches apt's Acquire::http(s)::Proxy settings, flat or in
// nested blocks once flattened, with an optional ::HOST for one host.
var aptProxy = regexp.MustCompile(`(?i)^acquire::(https?)::proxy(?:::([^\s"]+))?$`)

// parseAptConf reads apt's Acquire::http(s)::Proxy (a proxy set here makes
// apt ignore no_proxy; exceptions are Acquire::http::Proxy::HOST "DIRECT").
func parseAptConf(data string) cfgProxy {
	c := cfgProxy{tool: "apt", proxies: map[string]string{}, ownNoProxy: true}
	for _, kv := range aptFlatten(data) {
		m := aptProxy.FindStringSubmatch(kv[0])
		if m == nil {
			continue
		}
		proto, host, v := strings.ToLower(m[1]), m[2], kv[1]
		if host != "" {
			if strings.EqualFold(v, "DIRECT") {
				c.noProxy = append(c.noProxy, host)
			}
			continue
		}
		if strings.EqualFold(v, "DIRECT") || v == "false" {
			v = ""
		}
		c.proxies[proto] = v
	}
	if c.noProxy == nil && c.sets() {
		c.noProxy = []string{}
	}
	c.password = anyPassword(c.proxies)
	return c
}

// aptFlatten turns apt.conf's syntax (Name "value"; and Name { ... };
// blocks, // and # comments) into full names and values.
func aptFlatten(data string) [][2]string {
	var out [][2]string
	var stack []string
	var b strings.Builder
	for _, l := range strings.Split(data, "\n") {
		l = stripLineComment(l)
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") {
			continue
		}
		b.WriteString(l)
		b.WriteString(" ")
	}
	s := b.String()
	tok := regexp.MustCompile(`"[^"]*"|[{};]|[^\s{};"]+`)
	var name, value string
	flush := func() {
		if name != "" {
			full := strings.Join(append(append([]string{}, stack...), name), "::")
			out = append(out, [2]string{full, value})
		}
		name, value = "", ""
	}
	for _, t := range tok.FindAllString(s, -1) {
		switch {
		case t == "{":
			stack = append(stack, name)
			name, value = "", ""
		case t == "}":
			flush()
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case t == ";":
			flush()
		case strings.HasPrefix(t, "\""):
			value = strings.Trim(t, "\"")
		case name != "":
			value = t // an unquoted value: DIRECT, false
		default:
			name = t
		}
	}
	flush()
	return out
}

// stripLineComment cuts a // comment that is outside double quotes.
func stripLineComment(l string) string {
	in := false
	for i := 0; i+1 < len(l); i++ {
		switch {
		case l[i] == '"':
			in = !in
		case !in && l[i] == '/' && l[i+1] == '/':
			return l[:i]
		}
	}
	return l
}

// parseGitconfig reads http.proxy (and https.proxy, which git also
// reads); a per-URL [http "https://host"] proxy = "" makes an exception.
// git's libcurl still honours no_proxy from the environment.
func parseGitconfig(data string) cfgProxy {
	c := cfgProxy{tool: "git", proxies: map[string]string{}}
	iniLines(data, func(section, k, v string) {
		if k != "proxy" {
			return
		}
		sec, sub, _ := strings.Cut(section, " ")
		sec = strings.ToLower(sec)
		sub = strings.Trim(strings.TrimSpace(sub), "\"")
		switch {
		case (sec == "http" || sec == "https") && sub == "":
			c.proxies[sec] = v
		case sec == "http" && v == "":
			if h := hostOf(sub); h != "" {
				c.noProxy = append(c.noProxy, h)
			}
		}
	})
	c.password = anyPassword(c.proxies)
	return c
}

// parseHostsTOML reads containerd's registry host configuration: the
// upstream server and each [host."URL"] mirror, which containerd dials
// with its own environment's proxy.
func parseHostsTOML(data string) (cfgProxy, error) {
	var h struct {
		Server string                    `toml:"server"`
		Host   map[string]map[string]any `toml:"host"`
	}
	if err := toml.Unmarshal([]byte(data), &h); err != nil {
		return cfgProxy{}, fmt.Errorf("hosts.toml: %v", err)
	}
	c := cfgProxy{tool: "containerd", proxies: map[string]string{}}
	if h.Server != "" {
		c.mirrors = append(c.mirrors, h.Server)
	}
	for _, k := range sortedAnyKeys(h.Host) {
		c.mirrors = append(c.mirrors, k)
	}
	return c, nil
}

// agentProxyKeys are the keys common agents' YAML keeps proxies in:
// proxy_url (Prometheus and Grafana Agent scrape and remote-write
// clients, the OpenTelemetry Collector's exporters, New Relic),
// http_proxy/https_proxy/no_proxy (Datadog's proxy block, Telegraf,
// Fluent Bit's proxy), proxy.http/proxy.https/proxy.no_proxy (Datadog).
var agentProxyKeys = map[string]string{
	"proxy_url": "all", "proxyurl": "all", "http_proxy": "http", "https_proxy": "https",
	"proxy_http": "http", "proxy_https": "https",
}

// parseAgentYAML walks an agent's YAML for proxy keys at any depth.
func parseAgentYAML(data string) (cfgProxy, error) {
	var doc any
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		return cfgProxy{}, fmt.Errorf("YAML: %v", err)
	}
	c := cfgProxy{tool: "the agent", proxies: map[string]string{}}
	var walk func(parent string, v any)
	walk = func(parent string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range sortedAnyKeys(x) {
				val := x[k]
				lk := strings.ToLower(k)
				if s, ok := val.(string); ok {
					switch {
					case agentProxyKeys[lk] != "" && s != "":
						if _, dup := c.proxies[agentProxyKeys[lk]]; !dup {
							c.proxies[agentProxyKeys[lk]] = s
						}
						continue
					case parent == "proxy" && (lk == "http" || lk == "https") && s != "":
						c.proxies[lk] = s
						continue
					case lk == "no_proxy" || lk == "noproxy":
						c.ownNoProxy = true
						c.noProxy = append(c.noProxy, splitList(s)...)
						continue
					}
				}
				if (lk == "no_proxy" || lk == "noproxy") && isList(val) {
					c.ownNoProxy = true
					for _, e := range val.([]any) {
						c.noProxy = append(c.noProxy, fmt.Sprint(e))
					}
					continue
				}
				walk(lk, val)
			}
		case []any:
			for _, e := range x {
				walk(parent, e)
			}
		}
	}
	walk("", doc)
	c.password = anyPassword(c.proxies)
	return c, nil
}

func isList(v any) bool { _, ok := v.([]any); return ok }

func sortedAnyKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// splitList splits a NO_PROXY-like list on commas and blanks.
func splitList(v string) []string {
	var out []string
	for _, e := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		out = append(out, e)
	}
	return out
}

// anyPassword reports whether a proxy URL holds a password.
func anyPassword(m map[string]string) bool {
	for _, v := range m {
		if parseProxyURL(v).password {
			return true
		}
	}
	return false
}

// hostOf is a URL's or host:port's host, lower case.
func hostOf(s string) string {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u := parseProxyURL(s)
	return u.host
}

// proxyEndpoint is a proxy URL's host:port (the scheme's default port
// applied), the way two settings are compared.
func proxyEndpoint(v string) string {
	u := parseProxyURL(strings.TrimSpace(v))
	if u.host == "" {
		return ""
	}
	port := u.port
	if port == "" {
		switch u.scheme {
		case "https":
			port = "443"
		case "socks5", "socks5h", "socks4":
			port = "1080"
		default:
			port = "80"
		}
	}
	return net.JoinHostPort(u.host, port)
}

// mountedCfg is a configuration file a container sees in a ConfigMap or
// Secret volume of the input.
type mountedCfg struct {
	file  string // its path in the container
	src   string // "ConfigMap shop/maven key settings.xml"
	kind  string // ConfigMap or Secret
	field string // the volume mount's field path
	cfg   cfgProxy
	err   error // the file does not parse
}

// where says which file it is, for messages.
func (m mountedCfg) where() string { return m.file + " (" + m.src + ")" }

// mountedConfigs lists the configuration files c mounts from ConfigMaps
// and Secrets the resolver knows. Agent YAML files count only when they
// name a proxy or exceptions.
func (p *pod) mountedConfigs(c *container) []mountedCfg {
	if p.in.Resolver == nil {
		return nil
	}
	var out []mountedCfg
	for i, m := range c.c.VolumeMounts {
		for _, v := range p.in.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			var kind, name string
			var items map[string]string // key -> path
			switch {
			case v.ConfigMap != nil:
				kind, name = "ConfigMap", v.ConfigMap.Name
				items = keyPaths(v.ConfigMap.Items)
			case v.Secret != nil:
				kind, name = "Secret", v.Secret.SecretName
				items = keyPaths(v.Secret.Items)
			default:
				continue
			}
			var data map[string]string
			var err error
			if kind == "Secret" {
				data, err = p.in.Resolver.Secret(p.ns, name)
			} else {
				data, err = p.in.Resolver.ConfigMap(p.ns, name)
			}
			if err != nil {
				continue
			}
			for _, key := range sortedKeys(data) {
				rel := key
				if items != nil {
					r, ok := items[key]
					if !ok {
						continue
					}
					rel = r
				}
				file := path.Join(m.MountPath, rel)
				if m.SubPath != "" {
					if m.SubPath != rel {
						continue
					}
					file = path.Clean(m.MountPath)
				}
				k, ok := cfgKindOf(file)
				if !ok {
					continue
				}
				cfg, perr := parseCfg(k, data[key])
				if k == cfgAgent && (perr != nil || !cfg.sets() && cfg.noProxy == nil) {
					continue
				}
				out = append(out, mountedCfg{file: file, kind: kind, src: kind + " " + qualify(p.ns, name) + " key " + key,
					field: fmt.Sprintf("%s.volumeMounts[%d]", c.field, i), cfg: cfg, err: perr})
			}
		}
	}
	return out
}

func keyPaths(items []corev1.KeyToPath) map[string]string {
	if len(items) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, it := range items {
		m[it.Key] = it.Path
	}
	return m
}

// envProxyEndpoints are the proxies the container's variables name
// (host:port), with the variables; opaque when a value cannot be seen.
func envProxyEndpoints(env *environment) (eps map[string][]string, opaque bool) {
	eps = map[string][]string{}
	for _, v := range setProxyVars(env) {
		if !v.known {
			opaque = true
			continue
		}
		if ep := proxyEndpoint(v.value); ep != "" {
			eps[ep] = append(eps[ep], v.name)
		}
	}
	return eps, opaque || env.opaque
}

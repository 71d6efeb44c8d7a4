package doctor

import (
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"egret.io/egret/internal/noproxy"
)

// state is what every check reads: the validated options, the dependencies
// and the facts gathered once (environment, resolv.conf, lookups).
type state struct {
	o          Options
	d          Deps
	echo       *url.URL // nil without --echo
	echo2      *url.URL // a second echo endpoint, or nil
	expect     []netip.Prefix
	forbidden  []*url.URL
	rec        *recorder // what the checks saw, for the run record
	podOnce    sync.Once
	podF       podFacts
	proxyFlag  *url.URL // --proxy, nil when not given
	internal   []target // internal destinations
	env        noproxy.Env
	rc         resolvConf // the search list and nameservers
	rcErr      error
	clients    []noproxy.Client
	clientsWhy string
	lk         *lookups
}

// envFromList reads NAME=VALUE strings, skipping malformed ones (a later
// duplicate wins, as in a process environment).
func envFromList(list []string) noproxy.Env {
	env := noproxy.Env{}
	for _, kv := range list {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		env[name] = value
	}
	return env
}

// runtimeClients maps an executable found on PATH to the noproxy client
// models that stand for it.
var runtimeClients = []struct {
	exe     []string
	clients []string
}{
	{[]string{"curl"}, []string{"curl"}},
	{[]string{"wget"}, []string{"wget"}},
	{[]string{"python3", "python"}, []string{"python-urllib", "python-requests"}},
	{[]string{"node"}, []string{"node-http", "undici-7.22"}},
	{[]string{"java"}, []string{"java"}},
	{[]string{"ruby"}, []string{"ruby"}},
	{[]string{"dotnet"}, []string{"dotnet"}},
}

// exeRuntime maps an application's executable (its base name) to the
// runtime entry it is: "java", "node", "nodejs", "python3.11", "ruby".
func exeRuntime(exe string) (int, bool) {
	base := path.Base(exe)
	for i, rc := range runtimeClients {
		for _, e := range rc.exe {
			if base == e || (e == "python3" && strings.HasPrefix(base, "python3")) || (e == "node" && base == "nodejs") {
				return i, true
			}
		}
	}
	return 0, false
}

// detectClients returns "go" (Go programs, and egret itself) plus the
// models of the runtimes found on PATH and of the application's own
// executable (appExe, "" when not adopting a process: a distroless image
// has no PATH worth the name, but its process is java or node).
func detectClients(lookPath func(string) (string, error), appExe string) ([]noproxy.Client, string) {
	names := []string{"go"}
	var found []string
	have := map[int]bool{}
	if i, ok := exeRuntime(appExe); ok {
		have[i] = true
		names = append(names, runtimeClients[i].clients...)
		found = append(found, "the application's executable "+appExe)
	}
	for i, rc := range runtimeClients {
		if have[i] {
			continue
		}
		for _, exe := range rc.exe {
			if p, err := lookPath(exe); err == nil {
				names = append(names, rc.clients...)
				found = append(found, exe+" ("+p+")")
				break
			}
		}
	}
	cs, _ := noproxy.SelectClients(names)
	why := "go (always) and no other runtime on PATH"
	if len(found) > 0 {
		why = "go (always) and " + strings.Join(found, ", ")
		if appExe == "" {
			why = "go (always) and from PATH: " + strings.Join(found, ", ")
		}
	}
	return cs, why
}

// clientNames lists the selected client models.
func (s *state) clientNames() []string {
	out := make([]string, len(s.clients))
	for i, c := range s.clients {
		out[i] = c.Name
	}
	return out
}

// opTimeout is the bound of one network operation.
func (s *state) opTimeout() time.Duration { return s.o.Timeout }

// clusterDomain is the cluster DNS domain from resolv.conf's search list.
func (s *state) clusterDomain() string {
	if d := s.rc.clusterDomain(); d != "" {
		return d
	}
	return DefaultClusterDomain
}

// proxyVars are the variables a scheme's proxy comes from, in the order
// Go reads them (upper case first), then curl's ALL_PROXY fallback.
func proxyVars(scheme string) []string {
	if scheme == "https" {
		return []string{"HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"}
	}
	return []string{"HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"}
}

// proxyChoice is one proxy the checks use and where it comes from.
type proxyChoice struct {
	url  *url.URL // with credentials: never print, use redact
	from []string // variables (or "--proxy") holding this value
	err  error    // the value is not a usable proxy URL
	raw  string   // the value, for matching noproxy results (secret!)
}

// name is the redacted URL.
func (p proxyChoice) name() string {
	if p.url == nil {
		return redact(p.raw)
	}
	return redactURL(p.url)
}

// source names where the proxy comes from: "HTTPS_PROXY, https_proxy".
func (p proxyChoice) source() string { return strings.Join(p.from, ", ") }

// proxies returns the distinct proxies the clients would use for scheme:
// --proxy alone when given, else one per distinct value of the scheme's
// variables (HTTPS_PROXY and https_proxy may differ). ALL_PROXY counts only
// when neither case of the scheme's variable is set.
func (s *state) proxies(scheme string) []proxyChoice {
	if s.proxyFlag != nil {
		return []proxyChoice{{url: s.proxyFlag, from: []string{"--proxy"}, raw: s.proxyFlag.String()}}
	}
	vars := proxyVars(scheme)
	out := distinctProxies(s.env, vars[:2])
	if len(out) == 0 {
		out = distinctProxies(s.env, vars[2:])
	}
	return out
}

// distinctProxies returns one proxyChoice per distinct non-empty value of
// vars, in order.
func distinctProxies(env noproxy.Env, vars []string) []proxyChoice {
	var out []proxyChoice
	index := map[string]int{}
	for _, v := range vars {
		val := strings.TrimSpace(env[v])
		if val == "" {
			continue
		}
		if j, ok := index[val]; ok {
			out[j].from = append(out[j].from, v)
			continue
		}
		u, err := parseProxyURL(val)
		index[val] = len(out)
		out = append(out, proxyChoice{url: u, from: []string{v}, err: err, raw: val})
	}
	return out
}

// proxyByResult finds the proxy a noproxy Result names (redacted) among the
// scheme's proxies.
func (s *state) proxyByResult(scheme, redacted string) (proxyChoice, bool) {
	all := s.proxies(scheme)
	for _, p := range all {
		if p.url != nil && (redactURL(p.url) == redacted || redact(p.raw) == redacted || p.raw == redacted) {
			return p, true
		}
	}
	if len(all) > 0 && all[0].url != nil {
		return all[0], true
	}
	return proxyChoice{}, false
}

// parseProxyURL reads a proxy URL the way Go does: no scheme means http://.
func parseProxyURL(raw string) (*url.URL, error) {
	v := strings.TrimSpace(raw)
	if !strings.Contains(v, "://") {
		v = "http://" + v
	}
	u, err := url.Parse(v)
	if err != nil {
		return nil, fmt.Errorf("proxy %s is not a URL (special characters in the password must be percent-encoded)", redact(raw))
	}
	switch u.Scheme {
	case "http", "https", "socks5", "socks5h":
	default:
		return nil, fmt.Errorf("proxy %s: unsupported scheme %q", redact(raw), u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("proxy %s has no host", redact(raw))
	}
	return u, nil
}

// redactURL shows a URL with its password replaced.
func redactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Redacted()
}

// redact hides the password of a proxy value that may not parse.
func redact(v string) string {
	if !strings.Contains(v, "@") {
		return v
	}
	if u, err := url.Parse(v); err == nil && u.User != nil {
		return u.Redacted()
	}
	if i := strings.Index(v, "://"); i >= 0 {
		rest := v[i+3:]
		if j := strings.LastIndex(rest, "@"); j >= 0 {
			return v[:i+3] + "xxxxx@" + rest[j+1:]
		}
	}
	if j := strings.LastIndex(v, "@"); j >= 0 {
		return "xxxxx@" + v[j+1:]
	}
	return "xxxxx"
}

// anyProxySet reports whether any proxy variable has a value.
func (s *state) anyProxySet() bool {
	if s.proxyFlag != nil {
		return true
	}
	for _, v := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"} {
		if strings.TrimSpace(s.env[v]) != "" {
			return true
		}
	}
	return false
}

// noProxyValue is NO_PROXY as Go reads it (upper case first).
func (s *state) noProxyValue() (string, string) {
	if v := s.env["NO_PROXY"]; v != "" {
		return v, "NO_PROXY"
	}
	if v := s.env["no_proxy"]; v != "" {
		return v, "no_proxy"
	}
	return "", ""
}

// nodeEnvProxyOn reports whether Node.js reads the proxy variables
// (NODE_USE_ENV_PROXY=1 or --use-env-proxy in NODE_OPTIONS).
func (s *state) nodeEnvProxyOn() bool {
	return s.env["NODE_USE_ENV_PROXY"] == "1" || strings.Contains(s.env["NODE_OPTIONS"], "--use-env-proxy")
}

// explain predicts every selected client's decision for rawURL in the
// shell's environment. Node's core clients ignore the variables unless
// switched on; the noproxy models assume the switch, so it is applied here.
func (s *state) explain(rawURL string) ([]noproxy.Result, error) {
	rs, err := noproxy.Explain(rawURL, s.env, s.clients)
	if err != nil {
		return nil, err
	}
	if !s.nodeEnvProxyOn() {
		for i, r := range rs {
			if (r.Client == "node-http" || r.Client == "undici-7.22") && r.Decision == noproxy.DecisionProxy {
				rs[i] = noproxy.Result{Client: r.Client, Decision: noproxy.DecisionDirect,
					Reason: "NODE_USE_ENV_PROXY=1 is not set (nor --use-env-proxy in NODE_OPTIONS): Node.js ignores the proxy variables"}
			}
		}
	}
	return rs, nil
}

// joinAnd writes "a", "a and b", "a, b and c".
func joinAnd(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strings"

	"egret.io/egret/internal/noproxy"
)

// DropInName is the file name egret renders in a unit's drop-in directory.
const DropInName = "http-proxy.conf"

// EnvFileName is the environment file written beside the drop-in when the
// proxy URL carries credentials.
const EnvFileName = "http-proxy.env"

// SystemdDir is where administrators' unit drop-ins live.
const SystemdDir = "/etc/systemd/system"

// DefaultNoProxy are the entries every node daemon needs.
var DefaultNoProxy = []string{"localhost", "127.0.0.1", "::1"}

// RenderOptions are the inputs of Render.
type RenderOptions struct {
	Runtime Runtime
	// Proxy is the proxy URL for http:// and https:// requests. Required.
	Proxy string
	// NoProxy are NO_PROXY entries (each may itself be a comma-separated list).
	NoProxy []string
	// Registries are registry hosts (host or host:port) that must be reached
	// directly; their host names are added to NO_PROXY.
	Registries []string
}

// File is one rendered file.
type File struct {
	Path    string // absolute path on the node
	Content string
	Mode    uint32 // file mode (0644, or 0600 for files with credentials)
	Secret  bool   // holds credentials: never print it
}

// Rendered is the result of Render.
type Rendered struct {
	Unit    string // "containerd.service"
	DropIn  File
	EnvFile *File    // non-nil when the proxy URL has credentials
	NoProxy string   // the NO_PROXY value written
	Steps   []string // commands that apply the drop-in
	Note    string   // what the restart does
}

// Render builds the systemd drop-in for o.Runtime. Without credentials it
// is noproxy.RenderDropIn's drop-in (Environment= lines); with credentials
// (or %, \ or " in the URL, which noproxy's renderer refuses) the variables
// go to a 0600 EnvironmentFile instead.
func Render(o RenderOptions) (*Rendered, error) {
	if _, ok := runtimes[o.Runtime]; !ok {
		return nil, fmt.Errorf("unknown runtime %q", o.Runtime)
	}
	if strings.TrimSpace(o.Proxy) == "" {
		return nil, errors.New("a proxy URL is required")
	}
	proxy, err := checkProxyURL(o.Proxy)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	np, err := noProxyList(o.NoProxy, o.Registries)
	if err != nil {
		return nil, err
	}
	unit := o.Runtime.Unit()
	dir := path.Join(SystemdDir, unit+".d")
	r := &Rendered{Unit: unit, NoProxy: np, Steps: o.Runtime.RestartSteps(), Note: o.Runtime.RestartNote()}
	check := "# Check with: egret node check --runtime " + string(o.Runtime)
	for _, reg := range o.Registries {
		check += " --registry " + reg
	}
	if !hasCredentials(proxy) && !strings.ContainsAny(proxy, "%\\\"") {
		d, err := noproxy.RenderDropIn(noproxy.Runtime(o.Runtime), noproxy.DropInOptions{Proxy: proxy, NoProxy: np})
		if err != nil {
			return nil, err
		}
		head, rest, _ := strings.Cut(d.Content, "\n")
		r.DropIn = File{Path: d.Path, Content: head + "\n" + check + "\n" + rest, Mode: 0o644}
		return r, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by egret: proxy settings for %s. Apply with: %s\n", unit, strings.Join(r.Steps, " && "))
	b.WriteString(check + "\n")
	envPath := path.Join(dir, EnvFileName)
	fmt.Fprintf(&b, "# The proxy URL has credentials (or characters systemd would alter in Environment=):\n# the variables live in %s (mode 0600), which `systemctl show` does not print.\n", envPath)
	b.WriteString("[Service]\n")
	fmt.Fprintf(&b, "EnvironmentFile=%s\n", envPath)
	var e strings.Builder
	fmt.Fprintf(&e, "# Proxy settings for %s, written by egret. Keep this file mode 0600.\n", unit)
	for _, kv := range [][2]string{{"HTTP_PROXY", proxy}, {"http_proxy", proxy}, {"HTTPS_PROXY", proxy}, {"https_proxy", proxy}, {"NO_PROXY", np}, {"no_proxy", np}} {
		fmt.Fprintf(&e, "%s=%s\n", kv[0], quoteEnvFile(kv[1]))
	}
	r.EnvFile = &File{Path: envPath, Content: e.String(), Mode: 0o600, Secret: true}
	r.DropIn = File{Path: path.Join(dir, DropInName), Content: b.String(), Mode: 0o644}
	return r, nil
}

// checkProxyURL validates a proxy URL as Go's net/http will read it.
func checkProxyURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if strings.ContainsAny(s, "\n\r\x00") {
		return "", errors.New("the URL contains a line break or NUL")
	}
	if !strings.Contains(s, "://") {
		return "", errors.New("the URL has no scheme: write it as http://host:port")
	}
	u, err := url.Parse(s)
	if err != nil {
		// url errors quote the URL, which may hold a password.
		return "", errors.New("the URL does not parse (are special characters in the user name or password percent-encoded?)")
	}
	switch u.Scheme {
	case "http", "https", "socks5", "socks5h":
	default:
		return "", fmt.Errorf("unsupported scheme %q (want http, https, socks5 or socks5h)", u.Scheme)
	}
	if u.Hostname() == "" {
		return "", errors.New("the URL has no host")
	}
	return s, nil
}

func hasCredentials(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.User != nil
}

// Redact hides the password of a proxy URL.
func Redact(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		if strings.Contains(raw, "@") {
			return "(unparsable URL with credentials)"
		}
		return raw
	}
	return u.Redacted()
}

// noProxyList builds the NO_PROXY value: the defaults, the given entries and
// the registries' host names, without duplicates, in that order.
func noProxyList(entries, registries []string) (string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(e string) error {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil
		}
		if strings.ContainsAny(e, " \t\n\r\"'\\%$") {
			return fmt.Errorf("NO_PROXY entry %q has a blank, quote, backslash, %% or $", e)
		}
		if k := strings.ToLower(e); !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
		return nil
	}
	for _, e := range DefaultNoProxy {
		_ = add(e)
	}
	// noproxy.Normalize below drops duplicates the same way.
	for _, list := range entries {
		for _, e := range strings.Split(list, ",") {
			if err := add(e); err != nil {
				return "", err
			}
		}
	}
	for _, r := range registries {
		h, err := registryHost(r)
		if err != nil {
			return "", err
		}
		if err := add(h); err != nil {
			return "", err
		}
	}
	return noproxy.Normalize(strings.Join(out, ",")), nil
}

// registryHost returns the host of a registry reference ("registry.internal:5000",
// "https://registry.internal/v2/", "[fd00::5]:5000"): the NO_PROXY entry that
// covers it on every port.
func registryHost(r string) (string, error) {
	s := strings.TrimSpace(r)
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return "", fmt.Errorf("registry %q has no host", r)
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	s = strings.Trim(s, "[]")
	if a, err := netip.ParseAddr(s); err == nil {
		return a.String(), nil
	}
	if strings.ContainsAny(s, ":@ ,") {
		return "", fmt.Errorf("registry %q is not a host or host:port", r)
	}
	return strings.ToLower(s), nil
}

// quoteEnvFile quotes a value for an EnvironmentFile=: single quotes keep
// everything literal; a value containing a single quote is double-quoted
// with \ " $ and ` escaped.
func quoteEnvFile(v string) string {
	if !strings.Contains(v, "'") {
		return "'" + v + "'"
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`")
	return `"` + r.Replace(v) + `"`
}

package kubenode

import (
	"errors"
	"fmt"
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
var DefaultNoProxy = noproxy.RuntimeDefaults

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
	proxy, err := noproxy.CheckProxyURL(o.Proxy)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	np, err := noproxy.RuntimeNoProxy(o.NoProxy, o.Registries)
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

// registryHost is the NO_PROXY entry that covers registry r on every port.
func registryHost(r string) (string, error) { return noproxy.RegistryHost(r) }

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

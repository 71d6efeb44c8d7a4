package noproxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ConfigMapName is the ConfigMap that carries the cluster's NO_PROXY.
const ConfigMapName = "egress-proxy-common"

// Normalize returns a NO_PROXY value with entries trimmed, empty entries
// dropped and duplicates removed (first occurrence kept), joined by commas.
func Normalize(value string) string {
	seen := map[string]bool{}
	var out []string
	for _, e := range strings.Split(value, ",") {
		e = strings.TrimSpace(e)
		if e == "" || seen[strings.ToLower(e)] {
			continue
		}
		seen[strings.ToLower(e)] = true
		out = append(out, e)
	}
	return strings.Join(out, ",")
}

// WithEntries appends entries missing from value (case-insensitive).
func WithEntries(value string, add ...string) string {
	return Normalize(strings.Join(append([]string{value}, add...), ","))
}

// EnvVars returns the proxy variables in both cases, in a stable order:
// HTTP_PROXY, http_proxy, HTTPS_PROXY, https_proxy (when proxy is set),
// NO_PROXY, no_proxy.
func EnvVars(noProxy, proxy string) []corev1.EnvVar {
	var out []corev1.EnvVar
	if proxy != "" {
		out = append(out,
			corev1.EnvVar{Name: "HTTP_PROXY", Value: proxy}, corev1.EnvVar{Name: "http_proxy", Value: proxy},
			corev1.EnvVar{Name: "HTTPS_PROXY", Value: proxy}, corev1.EnvVar{Name: "https_proxy", Value: proxy})
	}
	np := Normalize(noProxy)
	return append(out, corev1.EnvVar{Name: "NO_PROXY", Value: np}, corev1.EnvVar{Name: "no_proxy", Value: np})
}

// RenderEnv writes EnvVars as NAME=VALUE lines (shell-quoted when needed).
func RenderEnv(noProxy, proxy string) string {
	var b strings.Builder
	for _, v := range EnvVars(noProxy, proxy) {
		fmt.Fprintf(&b, "%s=%s\n", v.Name, shellQuote(v.Value))
	}
	return b.String()
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(",./:-_*[]@%+=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ConfigMap returns the egress-proxy-common ConfigMap (keys NO_PROXY and
// no_proxy) for namespace ("" leaves it unset).
func ConfigMap(noProxy, namespace string) *corev1.ConfigMap {
	np := Normalize(noProxy)
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "egret"}},
		Data:       map[string]string{"NO_PROXY": np, "no_proxy": np},
	}
}

// RenderConfigMap writes ConfigMap as YAML.
func RenderConfigMap(noProxy, namespace string) (string, error) {
	b, err := yaml.Marshal(ConfigMap(noProxy, namespace))
	if err != nil {
		return "", fmt.Errorf("render configmap: %w", err)
	}
	return string(b), nil
}

// JavaNonProxyHosts translates a NO_PROXY value (egret's reading) into
// -Dhttp.nonProxyHosts form ("|"-separated, Java globs). Entries Java cannot
// express are dropped and reported in warnings:
//   - "x.com" → "x.com|*.x.com"; ".x.com" → "*.x.com|x.com"; "*.x.com" → "*.x.com"
//   - IPv4 CIDRs → "10.*", "10.1.*", ...; one off an octet boundary is first
//     split exactly into octet-aligned pieces (OctetAligned: 10.96.0.0/12 →
//     10.96.*|...|10.111.*), and dropped when that takes more than
//     MaxOctetPieces
//   - IPv6 addresses → "[fd00::1]"; IPv6 CIDRs dropped (except /128)
//   - "host:port" entries are dropped (Java has no per-port bypass)
func JavaNonProxyHosts(noProxy string) (string, []string) {
	entries, errs := Parse(noProxy)
	var warnings []string
	for _, err := range errs {
		warnings = append(warnings, fmt.Sprintf("%v: not translated", err))
	}
	var out []string
	seen := map[string]bool{}
	add := func(ps ...string) {
		for _, p := range ps {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	for _, e := range entries {
		if e.Port != 0 {
			warnings = append(warnings, fmt.Sprintf("entry %q dropped for Java: http.nonProxyHosts has no per-port entries", e.Raw))
			continue
		}
		switch e.Kind {
		case KindAll:
			add("*")
		case KindDomain:
			d := e.Domain
			if e.Rooted {
				d += "."
			}
			switch {
			case strings.HasPrefix(e.Raw, "*."):
				add("*." + d)
			case e.Apex:
				add(d, "*."+d)
			default:
				add("*."+d, d)
			}
		case KindIP:
			a := e.Prefix.Addr()
			if a.Is4() {
				add(a.String())
			} else {
				add("[" + a.String() + "]")
			}
		case KindCIDR:
			p := e.Prefix
			a := p.Addr()
			switch {
			case a.Is4() && p.Bits() == 0:
				add("*")
			case a.Is4():
				pieces := OctetAligned(p)
				if pieces == nil {
					warnings = append(warnings, fmt.Sprintf("entry %q dropped for Java: http.nonProxyHosts has no CIDRs and /%d would take more than %d octet wildcards", e.Raw, p.Bits(), MaxOctetPieces))
					continue
				}
				for _, piece := range pieces {
					add(octetGlob(piece))
				}
			case a.Is6() && p.Bits() == 128:
				add("[" + a.String() + "]")
			default:
				warnings = append(warnings, fmt.Sprintf("entry %q dropped for Java: http.nonProxyHosts has no CIDRs and cannot express IPv6 ranges", e.Raw))
			}
		}
	}
	return strings.Join(out, "|"), warnings
}

// MaxOctetPieces caps how many octet-aligned prefixes OctetAligned splits
// one IPv4 prefix into.
const MaxOctetPieces = 64

// OctetAligned splits an IPv4 prefix into the prefixes whose length is a
// multiple of 8 that cover exactly the same addresses (10.96.0.0/12 ->
// 10.96.0.0/16 ... 10.111.0.0/16), or returns nil when that takes more than
// MaxOctetPieces or p is not IPv4. An aligned prefix is returned as is.
func OctetAligned(p netip.Prefix) []netip.Prefix {
	p = p.Masked()
	if !p.Addr().Is4() || !p.IsValid() {
		return nil
	}
	bits := (p.Bits() + 7) / 8 * 8
	n := 1 << (bits - p.Bits())
	if n > MaxOctetPieces {
		return nil
	}
	a := p.Addr().As4()
	base := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	step := uint32(1) << (32 - bits) // 0 only for bits == 0, when n == 1
	out := make([]netip.Prefix, 0, n)
	for i := range n {
		v := base + uint32(i)*step
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits))
	}
	return out
}

// octetGlob writes an octet-aligned IPv4 prefix as a Java glob: "10.*",
// "10.96.*", "192.168.1.*", or the address itself for a /32.
func octetGlob(p netip.Prefix) string {
	o := p.Addr().As4()
	parts := make([]string, 0, 4)
	for i := 0; i < p.Bits()/8; i++ {
		parts = append(parts, strconv.Itoa(int(o[i])))
	}
	if p.Bits() == 32 {
		return strings.Join(parts, ".")
	}
	return strings.Join(parts, ".") + ".*"
}

// JavaToolOptions returns the -D options for JAVA_TOOL_OPTIONS: http(s).proxyHost
// and Port from proxy (when set) and http.nonProxyHosts from noProxy. Proxy
// credentials are never written (Java does not read them from properties).
func JavaToolOptions(proxy, noProxy string) (string, []string, error) {
	var opts []string
	if proxy != "" {
		p := proxy
		if !hasScheme(p) {
			p = "http://" + p
		}
		u, err := url.Parse(p)
		if err != nil || u.Hostname() == "" {
			return "", nil, fmt.Errorf("proxy %q is not a URL with a host", redact(proxy))
		}
		if s := strings.ToLower(u.Scheme); s != "http" {
			return "", nil, fmt.Errorf("proxy scheme %q: Java's http.proxyHost takes an HTTP proxy", s)
		}
		port := u.Port()
		if port == "" {
			port = "80"
		}
		host := u.Hostname()
		opts = append(opts, "-Dhttp.proxyHost="+host, "-Dhttp.proxyPort="+port, "-Dhttps.proxyHost="+host, "-Dhttps.proxyPort="+port)
	}
	np, warnings := JavaNonProxyHosts(noProxy)
	if np != "" {
		opt := "-Dhttp.nonProxyHosts=" + np
		if strings.ContainsAny(np, " \t'\"") {
			opt = "'" + opt + "'"
		}
		opts = append(opts, opt)
	}
	return strings.Join(opts, " "), warnings, nil
}

// Runtime is a node daemon that reads proxy variables from its systemd unit.
type Runtime string

// The daemons egret writes drop-ins for.
const (
	RuntimeContainerd Runtime = "containerd"
	RuntimeCRIO       Runtime = "crio"
	RuntimeDocker     Runtime = "docker"
	RuntimeKubelet    Runtime = "kubelet"
)

// Unit returns the systemd unit name of the runtime.
func (r Runtime) Unit() string { return string(r) + ".service" }

// DropIn is a rendered systemd drop-in file.
type DropIn struct {
	Path    string // e.g. /etc/systemd/system/containerd.service.d/http-proxy.conf
	Content string
}

// DropInOptions are the inputs of a runtime drop-in.
type DropInOptions struct {
	Proxy      string   // HTTP(S)_PROXY value; "" writes only NO_PROXY
	NoProxy    string   // the NO_PROXY value
	Registries []string // internal registries (host or host:port) that must be pulled directly
}

// RuntimeDefaults are the entries every node daemon's NO_PROXY needs.
var RuntimeDefaults = []string{"localhost", "127.0.0.1", "::1"}

// RuntimeNoProxy is the NO_PROXY of a node daemon (`egret node render` and
// `egret noproxy render --for containerd|crio|docker|kubelet` both write
// it): RuntimeDefaults, the entries (each may be a comma-separated list)
// and the registries' hosts, without duplicates, in that order. An entry Go
// cannot read (a bad port, a URL, ...) or that a systemd Environment= line
// would alter is refused, naming it.
func RuntimeNoProxy(entries, registries []string) (string, error) {
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
		if _, err := ParseEntry(e); err != nil {
			return err
		}
		if k := strings.ToLower(e); !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
		return nil
	}
	for _, e := range RuntimeDefaults {
		_ = add(e)
	}
	for _, list := range entries {
		for _, e := range strings.Split(list, ",") {
			if err := add(e); err != nil {
				return "", err
			}
		}
	}
	for _, r := range registries {
		if strings.TrimSpace(r) == "" {
			continue
		}
		h, err := RegistryHost(r)
		if err != nil {
			return "", err
		}
		if err := add(h); err != nil {
			return "", err
		}
	}
	return strings.Join(out, ","), nil
}

// RegistryHost returns the host of a registry reference ("registry.internal:5000",
// "https://registry.internal/v2/", "[fd00::5]:5000"): the NO_PROXY entry that
// covers it on every port. A port must be 1-65535.
func RegistryHost(r string) (string, error) {
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
	if h, port, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return "", fmt.Errorf("registry %q: port %q is not a number from 1 to 65535", r, port)
		}
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

// CheckProxyURL validates a proxy URL as Go's net/http will read it: a
// scheme egret and the runtimes know, a host, a port 1-65535. Errors never
// quote the URL (it may hold a password).
func CheckProxyURL(raw string) (string, error) {
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
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return "", fmt.Errorf("port %q is not a number from 1 to 65535", p)
		}
	}
	return s, nil
}

// CheckValue refuses a NO_PROXY value with entries Go cannot read, naming
// each (the renderers write only what every consumer reads as meant).
func CheckValue(value string) error {
	_, errs := Parse(value)
	return errors.Join(errs...)
}

// RenderDropIn renders the systemd drop-in for r: both-case variables with
// RuntimeNoProxy's NO_PROXY (the defaults, o.NoProxy and the registries'
// hosts). Daemons read it once: restart them.
func RenderDropIn(r Runtime, o DropInOptions) (DropIn, error) {
	switch r {
	case RuntimeContainerd, RuntimeCRIO, RuntimeDocker, RuntimeKubelet:
	default:
		return DropIn{}, fmt.Errorf("unknown runtime %q (containerd, crio, docker, kubelet)", r)
	}
	if o.Proxy != "" {
		if _, err := CheckProxyURL(o.Proxy); err != nil {
			return DropIn{}, fmt.Errorf("proxy: %w", err)
		}
	}
	np, err := RuntimeNoProxy([]string{o.NoProxy}, o.Registries)
	if err != nil {
		return DropIn{}, err
	}
	if strings.ContainsAny(np+o.Proxy, "\"\\\n%") {
		return DropIn{}, fmt.Errorf("values for a systemd Environment= line must not contain quotes, backslashes, %% or line breaks")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by egret: proxy settings for %s. Apply with: systemctl daemon-reload && systemctl restart %s\n", r.Unit(), r.Unit())
	b.WriteString("[Service]\n")
	for _, v := range EnvVars(np, o.Proxy) {
		fmt.Fprintf(&b, "Environment=\"%s=%s\"\n", v.Name, v.Value)
	}
	return DropIn{Path: "/etc/systemd/system/" + r.Unit() + ".d/http-proxy.conf", Content: b.String()}, nil
}

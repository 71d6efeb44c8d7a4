package noproxy

import (
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

// RenderDropIn renders the systemd drop-in for r: both-case variables, the
// registries added to NO_PROXY (as written and, for host:port, the bare host
// too, so every client form matches). Daemons read it once: restart them.
func RenderDropIn(r Runtime, o DropInOptions) (DropIn, error) {
	switch r {
	case RuntimeContainerd, RuntimeCRIO, RuntimeDocker, RuntimeKubelet:
	default:
		return DropIn{}, fmt.Errorf("unknown runtime %q (containerd, crio, docker, kubelet)", r)
	}
	np := o.NoProxy
	for _, reg := range o.Registries {
		reg = strings.TrimSpace(reg)
		if reg == "" {
			continue
		}
		np = WithEntries(np, reg)
		if h, _, err := net.SplitHostPort(reg); err == nil {
			np = WithEntries(np, strings.Trim(h, "[]"))
		}
	}
	np = Normalize(np)
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

var _ = netip.Addr{}

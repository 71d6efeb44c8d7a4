package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"egret.io/egret/internal/lint"
)

// Annotations and labels egret reads on pods and namespaces.
const (
	// InjectAnnotation on a pod: "true" opts it in, "false" opts it out
	// (both win over the namespace label).
	InjectAnnotation = "egret.io/inject"
	// ModeAnnotation on a pod (or its namespace) picks the mode: gateway,
	// sidecar or transparent.
	ModeAnnotation = "egret.io/mode"
	// ValidationAnnotation on a namespace overrides the validation policy
	// for its pods (off, warn, enforce): roll enforcement out namespace by
	// namespace.
	ValidationAnnotation = "egret.io/validation"
	// InjectedAnnotation records the mode egret injected.
	InjectedAnnotation = lint.InjectedAnnotation
)

// Names of the containers egret adds.
const (
	SidecarName  = "egret-proxy"
	IptablesName = "egret-iptables"
)

// Ports and user of the sidecar.
const (
	SidecarProxyPort       = 3128
	SidecarAdminPort       = 9901
	SidecarTransparentPort = 15001
)

// Mode is how a pod reaches the proxy.
type Mode int

// The modes.
const (
	// Gateway points the variables at the egress gateway Service.
	Gateway Mode = iota + 1
	// Sidecar adds the egret proxy as a native sidecar and points the
	// variables at it (127.0.0.1:3128).
	Sidecar
	// Transparent is Sidecar plus the `egret iptables` init container that
	// redirects the TCP traffic of clients that ignore the variables.
	Transparent
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Gateway:
		return "gateway"
	case Sidecar:
		return "sidecar"
	case Transparent:
		return "transparent"
	default:
		return fmt.Sprintf("unknown(%d)", int(m))
	}
}

// ParseMode reads gateway, sidecar or transparent.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "gateway":
		return Gateway, nil
	case "sidecar":
		return Sidecar, nil
	case "transparent":
		return Transparent, nil
	}
	return 0, fmt.Errorf("mode %q: want gateway, sidecar or transparent", s)
}

// Enforcement is what validation does with a finding of severity error.
type Enforcement int

// The enforcement levels.
const (
	// Off skips validation.
	Off Enforcement = iota + 1
	// Warn returns findings as admission warnings and admits the pod.
	Warn
	// Enforce denies a pod with an error finding (warnings stay warnings).
	Enforce
)

// String returns off, warn or enforce.
func (e Enforcement) String() string {
	switch e {
	case Off:
		return "off"
	case Warn:
		return "warn"
	case Enforce:
		return "enforce"
	default:
		return fmt.Sprintf("unknown(%d)", int(e))
	}
}

// ParseEnforcement reads off, warn or enforce.
func ParseEnforcement(s string) (Enforcement, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off":
		return Off, nil
	case "warn":
		return Warn, nil
	case "enforce":
		return Enforce, nil
	}
	return 0, fmt.Errorf("validation %q: want off, warn or enforce", s)
}

// Config is the wire form of a Policy (flags of `egret webhook`).
type Config struct {
	Mode       string // gateway (default), sidecar, transparent
	GatewayURL string // the gateway Service, e.g. http://egret-gateway.egret-system.svc:3128
	Image      string // the egret image for the sidecar
	// IptablesImage runs `egret iptables` in transparent mode; default
	// Image's tag with "-iptables" appended (the image `make
	// image-iptables` builds: the plain image has no iptables programs).
	IptablesImage  string
	UpstreamSecret string // Secret the sidecar reads its upstream from (envFrom, optional)
	Validation     string // off, warn (default), enforce
	// Fallback when the API server has no native sidecars: "gateway" (use
	// the gateway, with a warning) or "refuse" (deny the pod).
	Fallback string
	// ExcludedNamespaces are never mutated or validated (egret's own and
	// kube-system are always added).
	ExcludedNamespaces []string
	// NativeSidecars says whether the API server runs native sidecars
	// (NativeSidecarsSupported of its version).
	NativeSidecars bool
	// Trust configures the CA injection (ca.go); zero: none.
	Trust TrustConfig
	// GatewayToken gives a sidecar that chains to the gateway the pod's
	// projected service-account token (token.go), for a gateway that
	// identifies workloads (EGRET_POLICY).
	GatewayToken bool
	// SidecarResources are the injected sidecar's resources ("" keeps the
	// built-in ones); pods override them with annotations (sidecarres.go).
	SidecarResources SidecarResources
	// ImagePullSecrets are added to the pods egret gives a sidecar.
	ImagePullSecrets []string
	// SidecarUID is the UID of the injected sidecar, which the iptables
	// rules let through; 0 means DefaultSidecarUID (not istio-proxy's
	// 1337). Pods override it with SidecarUIDAnnotation.
	SidecarUID int64
	// Mesh is what transparent mode does in a pod with an Istio or Linkerd
	// proxy: "refuse" (default) or "exclude" (mesh.go); pods and
	// namespaces override it with MeshAnnotation.
	Mesh string
}

// Policy is a validated Config. It is immutable; build a new one to change it.
type Policy struct {
	Mode           Mode
	Gateway        *url.URL // nil when no gateway is configured
	Image          string
	IptablesImage  string
	UpstreamSecret string
	Validation     Enforcement
	FallbackRefuse bool
	Excluded       map[string]bool
	NativeSidecars bool
	Trust          *TrustPolicy // nil: no CA injection
	GatewayToken   bool
	// SidecarResources holds the flags' quantities by resourceSettings index.
	SidecarResources map[int]resource.Quantity
	ImagePullSecrets []string
	SidecarUID       int64
	Mesh             MeshAction
}

// Compile validates c into a Policy. ownNamespace is always excluded, and so
// is kube-system.
func (c Config) Compile(ownNamespace string) (*Policy, error) {
	var errs []error
	p := &Policy{Image: c.Image, IptablesImage: c.IptablesImage, UpstreamSecret: c.UpstreamSecret,
		NativeSidecars: c.NativeSidecars, Excluded: map[string]bool{"kube-system": true}, GatewayToken: c.GatewayToken}
	if sr, err := c.SidecarResources.compile(); err != nil {
		errs = append(errs, err)
	} else {
		p.SidecarResources = sr
	}
	for _, s := range c.ImagePullSecrets {
		if s = strings.TrimSpace(s); s != "" {
			p.ImagePullSecrets = append(p.ImagePullSecrets, s)
		}
	}
	if p.IptablesImage == "" && p.Image != "" {
		var err error
		if p.IptablesImage, err = iptablesVariant(p.Image); err != nil && c.Mode == "transparent" {
			errs = append(errs, err)
		}
	}
	if ownNamespace != "" {
		p.Excluded[ownNamespace] = true
	}
	for _, ns := range c.ExcludedNamespaces {
		if ns = strings.TrimSpace(ns); ns != "" {
			p.Excluded[ns] = true
		}
	}
	mode := c.Mode
	if mode == "" {
		mode = "gateway"
	}
	var err error
	if p.Mode, err = ParseMode(mode); err != nil {
		errs = append(errs, err)
	}
	v := c.Validation
	if v == "" {
		v = "warn"
	}
	if p.Validation, err = ParseEnforcement(v); err != nil {
		errs = append(errs, err)
	}
	switch c.Fallback {
	case "", "gateway":
	case "refuse":
		p.FallbackRefuse = true
	default:
		errs = append(errs, fmt.Errorf("fallback %q: want gateway or refuse", c.Fallback))
	}
	if c.GatewayURL != "" {
		u, err := url.Parse(c.GatewayURL)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("gateway url: %w", err))
		case u.Scheme != "http" || u.Hostname() == "" || u.Port() == "" || u.User != nil || (u.Path != "" && u.Path != "/"):
			errs = append(errs, fmt.Errorf("gateway url %q: want http://host:port (no credentials: the gateway holds them)", redact(c.GatewayURL)))
		default:
			u.Path = ""
			p.Gateway = u
		}
	}
	if p.Mode == Gateway && p.Gateway == nil {
		errs = append(errs, errors.New("gateway mode needs --gateway-url"))
	}
	if p.Trust, err = c.Trust.compile(ownNamespace); err != nil {
		errs = append(errs, err)
	}
	if p.Mode != Gateway && p.Image == "" {
		errs = append(errs, fmt.Errorf("%s mode needs --image (the egret image for the sidecar)", p.Mode))
	}
	p.SidecarUID = DefaultSidecarUID
	if c.SidecarUID != 0 {
		if p.SidecarUID, err = parseUID(strconv.FormatInt(c.SidecarUID, 10)); err != nil {
			errs = append(errs, fmt.Errorf("--sidecar-uid: %w", err))
		}
	}
	mesh := c.Mesh
	if mesh == "" {
		mesh = "refuse"
	}
	if p.Mesh, err = ParseMeshAction(mesh); err != nil {
		errs = append(errs, fmt.Errorf("--mesh: %w", err))
	}
	return p, errors.Join(errs...)
}

// iptablesVariant names the image with the iptables programs that goes with
// image: the same reference with "-iptables" appended to its tag
// (ghcr.io/egret-io/egret:0.1.0 → ghcr.io/egret-io/egret:0.1.0-iptables;
// no tag means latest). An image pinned by digest has no such name.
func iptablesVariant(image string) (string, error) {
	if strings.Contains(image, "@") {
		return "", fmt.Errorf("--image %q is pinned by digest, so its iptables variant cannot be named: set --iptables-image (the image `make image-iptables` builds)", image)
	}
	if strings.LastIndex(image, ":") > strings.LastIndex(image, "/") {
		return image + "-iptables", nil
	}
	return image + ":latest-iptables", nil
}

// proxyFor returns the proxy URL (scheme://host:port) and its host and port
// for a pod in mode m.
func (p *Policy) proxyFor(m Mode) (string, string, int) {
	if m == Gateway && p.Gateway != nil {
		port, _ := strconv.Atoi(p.Gateway.Port())
		return "http://" + p.Gateway.Host, p.Gateway.Hostname(), port
	}
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(SidecarProxyPort)), "127.0.0.1", SidecarProxyPort
}

package stamp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Annotation holds a pod's Stamp as compact JSON.
const Annotation = "egret.io/injected-state"

// Label marks the pods egret injected (value: the mode), so the drift
// controller and `egret pods` select them without reading every pod.
const Label = "egret.io/injected"

// Version is the stamp format Encode writes and Parse reads.
const Version = 1

// maxLen bounds what Parse reads: a stamp is a few hundred bytes.
const maxLen = 4096

// Stamp is what the webhook injected into one pod.
type Stamp struct {
	// V is the format version (Version).
	V int `json:"v"`
	// Mode is gateway, sidecar or transparent.
	Mode string `json:"mode"`
	// NoProxy is Hash of the NO_PROXY value injected (the cluster's plus
	// the namespace's additions).
	NoProxy string `json:"noProxy"`
	// Proxy is the proxy URL the variables point at (the gateway Service,
	// or the sidecar on loopback). It never holds credentials.
	Proxy string `json:"proxy,omitempty"`
	// Image is the sidecar's image (sidecar and transparent modes).
	Image string `json:"image,omitempty"`
	// IptablesImage is the iptables init container's image (transparent).
	IptablesImage string `json:"iptablesImage,omitempty"`
	// ProxyUID is the UID the sidecar runs as, which the iptables rules
	// let through (sidecar and transparent modes).
	ProxyUID *int64 `json:"proxyUID,omitempty"`
	// Mesh is the service mesh found beside the sidecar and what egret
	// did about it ("istio/exclude"); empty when none.
	Mesh string `json:"mesh,omitempty"`
	// Upstream is the Secret the sidecar reads its upstream proxy from, as
	// environment variables read once at start; nil when none.
	Upstream *Upstream `json:"upstream,omitempty"`
	// Trust is the CA bundle mounted into the pod; nil when none.
	Trust *Trust `json:"trust,omitempty"`
}

// Upstream identifies the upstream Secret's content by its version.
type Upstream struct {
	// Secret is the Secret's name (in the pod's namespace).
	Secret string `json:"secret"`
	// Version is the Secret's resourceVersion at injection; "" when the
	// Secret did not exist, VersionUnknown when it could not be read.
	Version string `json:"version"`
}

// VersionUnknown is an upstream Secret version egret could not read: never
// compared.
const VersionUnknown = "unknown"

// Trust identifies the trust bundle mounted into the pod.
type Trust struct {
	// ConfigMap is the ConfigMap's name (in the pod's namespace).
	ConfigMap string `json:"configMap"`
	// Owner is who wrote it: always "egret" (egret mounts no other).
	Owner string `json:"owner"`
	// UID is the ConfigMap's UID: a ConfigMap deleted and made again by
	// someone else is another object.
	UID string `json:"uid"`
	// Digest is the bundle's content digest (trust.Digest): the sidecar
	// refuses to start when the mounted bundle has another.
	Digest string `json:"digest"`
}

// Hash returns the short hash the stamp keeps of a value: "sha256:" and
// the first 16 hex digits of its SHA-256.
func Hash(v string) string {
	s := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(s[:8])
}

// Encode returns the stamp as the annotation's value.
func (s Stamp) Encode() string {
	s.V = Version
	b, err := json.Marshal(s)
	if err != nil { // a Stamp always marshals
		panic(err)
	}
	return string(b)
}

// Parse reads an annotation value. An empty value is ErrNone.
func Parse(v string) (Stamp, error) {
	var s Stamp
	switch {
	case v == "":
		return s, ErrNone
	case len(v) > maxLen:
		return s, fmt.Errorf("stamp of %d bytes: longer than %d", len(v), maxLen)
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, fmt.Errorf("stamp: %w", err)
	}
	if s.V != Version {
		return s, fmt.Errorf("stamp version %d: this egret reads version %d", s.V, Version)
	}
	return s, nil
}

// ErrNone is Parse's error for a pod without a stamp (injected by an egret
// before stamps, or not injected).
var ErrNone = errors.New("no " + Annotation + " annotation")

// Part is one part of what the webhook injects; a closed set (metric
// label values).
type Part string

// The parts, in the order Compare reports them.
const (
	PartNoProxy  Part = "noproxy"
	PartProxy    Part = "proxy"
	PartImage    Part = "image"
	PartUID      Part = "uid"
	PartUpstream Part = "upstream_secret"
	PartTrust    Part = "trust"
)

// Parts lists every Part in report order.
var Parts = []Part{PartNoProxy, PartProxy, PartImage, PartUID, PartUpstream, PartTrust}

// Current is what the webhook would inject into the pod now. A field left
// at its zero value is not known and not compared (the report says so).
type Current struct {
	// NoProxy is Hash of the namespace's NO_PROXY now.
	NoProxy string
	// Proxy is the proxy URL for the pod's mode now.
	Proxy string
	// Image and IptablesImage are the images the webhook injects now.
	Image, IptablesImage string
	// ProxyUID is the UID the webhook gives the sidecar now; nil: unknown.
	ProxyUID *int64
	// UpstreamVersion returns the upstream Secret's version now ("" when
	// it does not exist); nil: unknown.
	UpstreamVersion func(secret string) (string, bool)
	// TrustDigest is the digest of the bundle egret built; "" unknown.
	TrustDigest string
	// TrustInNamespace reports the content digest and UID of the ConfigMap
	// the pod mounted, as it is now in the pod's namespace (whoever wrote
	// it); ok false when there is none or it is not known; nil: unknown.
	TrustInNamespace func() (digest, uid string, ok bool)
}

// Compare returns the parts of s that differ from c, in Parts order. A
// part c does not know is not reported.
func Compare(s Stamp, c Current) []Part {
	var out []Part
	if c.NoProxy != "" && s.NoProxy != c.NoProxy {
		out = append(out, PartNoProxy)
	}
	if c.Proxy != "" && s.Proxy != "" && s.Proxy != c.Proxy {
		out = append(out, PartProxy)
	}
	if s.Mode != "gateway" {
		if (c.Image != "" && s.Image != "" && s.Image != c.Image) ||
			(c.IptablesImage != "" && s.IptablesImage != "" && s.IptablesImage != c.IptablesImage) {
			out = append(out, PartImage)
		}
		if c.ProxyUID != nil && s.ProxyUID != nil && *s.ProxyUID != *c.ProxyUID {
			out = append(out, PartUID)
		}
	}
	if s.Upstream != nil && s.Upstream.Version != VersionUnknown && c.UpstreamVersion != nil {
		if v, ok := c.UpstreamVersion(s.Upstream.Secret); ok && v != VersionUnknown && v != s.Upstream.Version {
			out = append(out, PartUpstream)
		}
	}
	if s.Trust != nil {
		stale := c.TrustDigest != "" && s.Trust.Digest != c.TrustDigest
		if c.TrustInNamespace != nil {
			if d, uid, ok := c.TrustInNamespace(); ok && (d != s.Trust.Digest || uid != s.Trust.UID) {
				stale = true
			}
		}
		if stale {
			out = append(out, PartTrust)
		}
	}
	return out
}

// UID returns a pointer to uid, for Stamp.ProxyUID and Current.ProxyUID.
func UID(uid int64) *int64 { return &uid }

// String names the part for people.
func (p Part) String() string { return string(p) }

// ParsePart reads a part name.
func ParsePart(s string) (Part, error) {
	for _, p := range Parts {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, len(Parts))
	for i, p := range Parts {
		names[i] = string(p)
	}
	return "", fmt.Errorf("part %q: want one of %s", s, strings.Join(names, ", "))
}

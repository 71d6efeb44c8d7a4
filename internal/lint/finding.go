package lint

import (
	"net/url"

	"egret.io/egret/internal/severity"
)

// Severity says how bad a finding is: the one scale of package severity,
// shared with noproxy's findings.
type Severity = severity.Level

// The severities, in increasing order. An Error makes `egret lint` exit 1 and
// the webhook refuse the pod (in enforcing mode).
const (
	Info    = severity.Info
	Warning = severity.Warning
	Error   = severity.Error
)

// ObjectRef names a Kubernetes object.
type ObjectRef struct {
	Kind      string
	Namespace string // "" when the object does not say (then "default" is assumed for references)
	Name      string
}

// String returns "Kind/namespace/name", or "Kind/name" without a namespace.
func (o ObjectRef) String() string {
	if o.Namespace == "" {
		return o.Kind + "/" + o.Name
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

// Finding is one problem found by one rule.
type Finding struct {
	Rule      string    // rule ID, e.g. "no-proxy-missing"
	Severity  Severity  // the rule's severity (some rules lower it for a given case)
	Object    ObjectRef // the object the finding is about
	Container string    // the container, or "" for object-level findings
	// Field is the path of the offending field inside the object, in
	// kubectl's JSONPath-like form ("spec.template.spec.containers[0].env[2]"),
	// or "" when the finding is about the object as a whole.
	Field   string
	Message string // what is wrong and what to change; never holds a secret value
	// File and Line locate the finding in the input; set by Check (manifests),
	// empty for CheckPod. Line is 1-based, 0 when unknown.
	File string
	Line int
}

// DefaultDocsBase is the page the rule anchors point into when no other home
// is given: egret's lint reference, as a path relative to the repository
// root (it resolves in a checkout of egret and wherever the docs are
// published beside the report). `egret lint --docs-base URL` points the links elsewhere.
const DefaultDocsBase = "docs/lint.md"

// DocsURL returns the link that documents rule id: base#id, where base is
// the lint reference (or its published copy; "" means DefaultDocsBase), which has a
// heading per rule named after its ID.
func DocsURL(base, id string) string {
	if base == "" {
		base = DefaultDocsBase
	}
	return base + "#" + id
}

// absoluteURI reports whether s is an absolute URI (has a scheme), which
// SARIF's helpUri and informationUri require.
func absoluteURI(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && u.IsAbs()
}

// MaxSeverity returns the highest severity among fs, or 0 when fs is empty.
func MaxSeverity(fs []Finding) Severity {
	var m Severity
	for _, f := range fs {
		if f.Severity > m {
			m = f.Severity
		}
	}
	return m
}

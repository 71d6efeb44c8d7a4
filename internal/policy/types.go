package policy

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"egret.io/egret/internal/intercept"
)

// The API group and version of the policy resources.
const (
	Group   = "egret.io"
	Version = "v1alpha1"
)

// Kinds and resources.
const (
	KindEgressPolicy        = "EgressPolicy"
	KindClusterEgressPolicy = "ClusterEgressPolicy"
	// DefaultName is the name of the ClusterEgressPolicy that is the
	// cluster default; other ClusterEgressPolicies are not accepted.
	DefaultName = "default"
)

// Resources, for the dynamic client.
var (
	EgressPolicies        = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "egresspolicies"}
	ClusterEgressPolicies = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "clusteregresspolicies"}
)

// EgressPolicy is what the pods it selects in its namespace may reach
// through the egress gateway, and how. A ClusterEgressPolicy named
// "default" has the same shape (without a pod selector): it applies to the
// pods no EgressPolicy selects and to clients the gateway cannot identify,
// and its deny rules apply to every client.
type EgressPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// heldBackMode starts the Mode of a policy whose spec the gateway's cache
// did not keep (FromUnstructured); the rest says why. No object has it:
// a NUL cannot be written in one.
const heldBackMode = "\x00held back: "

// Spec is a policy's wire form. Validation and compilation are in
// Compile.
type Spec struct {
	// PodSelector selects pods of the policy's namespace by label; empty or
	// absent selects every pod. Not allowed on a ClusterEgressPolicy.
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	// Mode is enforce (the default) or report: a report-only policy
	// changes no verdict; what it would deny is logged as would_deny.
	Mode string `json:"mode,omitempty"`
	// Egress are the rules, in order. Any deny rule that matches, of any
	// policy that applies to the client, wins; otherwise the first allow
	// rule of the deciding policy that matches lets the destination
	// through.
	Egress []Rule `json:"egress,omitempty"`
	// Default is what happens to a destination no rule matches: deny (the
	// default) or allow.
	Default string `json:"default,omitempty"`
	// Pool is the gateway's upstream pool for the allowed traffic of the
	// workload (a rule's own pool wins); empty: the gateway's routes
	// decide.
	Pool string `json:"pool,omitempty"`
	// Limits bound the workload's new requests and tunnels.
	Limits *Limits `json:"limits,omitempty"`
	// SNI, for CONNECT tunnels to TLS ports (443), checks that the TLS
	// ClientHello names the CONNECT target (no domain fronting): off (the
	// default), report or enforce.
	SNI string `json:"sni,omitempty"`
	// Intercept are the destinations the gateway terminates TLS for, for
	// the workload: their credentials and method/path rules
	// (docs/interception.md). Only the deciding policy's sites and the
	// cluster default's apply, and those of the gateway's configuration
	// come first.
	Intercept []InterceptSite `json:"intercept,omitempty"`
}

// InterceptSite is one intercepted destination of a policy.
type InterceptSite struct {
	// Hosts: "api.example.com" (that name), ".example.com" or
	// "*.example.com" (its subdomains).
	Hosts []string `json:"hosts"`
	// Exempt are TLS server names among Hosts that stay opaque tunnels
	// (pinned-certificate and client-certificate origins).
	Exempt []string `json:"exempt,omitempty"`
	// Credentials are headers the gateway sets from Secrets, replacing any
	// the client sent.
	Credentials []InterceptCredential `json:"credentials,omitempty"`
	// HTTP are the method and path rules.
	HTTP *intercept.RulesSpec `json:"http,omitempty"`
}

// InterceptCredential is a header the gateway sets from a Secret the
// API server holds.
type InterceptCredential struct {
	// Secret names the Secret: in an EgressPolicy, a Secret of the
	// policy's own namespace (a name, never namespace/name); in the
	// ClusterEgressPolicy, namespace/name. The gateway's configuration
	// grants the Secrets it may read (intercept.secrets); another makes
	// the policy invalid (SecretNotGranted).
	Secret string `json:"secret"`
	// Scheme is bearer (the default), basic or raw.
	Scheme string `json:"scheme,omitempty"`
	// Header is the header set; Authorization by default, required for
	// raw.
	Header string `json:"header,omitempty"`
	// Keys are the Secret's keys holding the value: one (default token),
	// or for basic the user name and the password (default username,
	// password).
	Keys []string `json:"keys,omitempty"`
}

// Rule allows or denies destinations. Hosts, Suffixes and CIDRs are
// alternatives (a destination matching any of them matches); Ports, when
// set, must match too. A rule with only Ports matches every host on them;
// the host "*" matches every destination.
type Rule struct {
	// Name appears in logs and explain; optional.
	Name   string `json:"name,omitempty"`
	Action string `json:"action"` // allow or deny
	// Hosts are exact names or IP literals.
	Hosts []string `json:"hosts,omitempty"`
	// Suffixes follow NO_PROXY conventions: ".example.com" is the names
	// below example.com, "example.com" the name and those below it.
	Suffixes []string `json:"suffixes,omitempty"`
	// CIDRs match IP literals, and names by the addresses they resolve to.
	CIDRs []string `json:"cidrs,omitempty"`
	Ports []int32  `json:"ports,omitempty"`
	// Pool, on an allow rule, is the upstream pool for what it allows.
	Pool string `json:"pool,omitempty"`
}

// Limits bound a workload's new requests and tunnels: Requests per Unit
// (shared by the gateway replicas when a rate-limit service is
// configured, else per replica) and MaxConcurrent in flight (per replica).
type Limits struct {
	Requests      int32  `json:"requests,omitempty"`
	Unit          string `json:"unit,omitempty"` // second (default), minute or hour
	MaxConcurrent int32  `json:"maxConcurrent,omitempty"`
}

// Status is what the gateway reports about a policy.
type Status struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types and reasons.
const (
	// ConditionAccepted is True when the policy compiled and is in force;
	// False (with the reason) when it is invalid, in which case it denies
	// everything to the pods it would select.
	ConditionAccepted = "Accepted"

	ReasonValid       = "Valid"
	ReasonInvalid     = "Invalid"
	ReasonUnknownPool = "UnknownPool"
	ReasonNotDefault  = "NotDefault"
	// ReasonPoolNotGranted: an EgressPolicy names a pool the gateway does
	// not grant to its namespace (pools.<name>.namespaces).
	ReasonPoolNotGranted = "PoolNotGranted"
	// ReasonLimitExceeded: the policy is beyond one of the limits below;
	// the message names it.
	ReasonLimitExceeded = "LimitExceeded"
	// ReasonSecretNotGranted: a credential names a Secret the gateway's
	// configuration does not grant (intercept.secrets), or, in an
	// EgressPolicy, a Secret of another namespace.
	ReasonSecretNotGranted = "SecretNotGranted"
	// ReasonInterceptUnavailable: the policy intercepts, and the gateway
	// has no interception CA (its configuration's intercept.ca_dir).
	ReasonInterceptUnavailable = "InterceptUnavailable"
)

// What a tenant can make the gateway hold (docs/policy.md, "Limits"). The
// CRD's schema has the per-rule and per-policy counts too; the gateway
// checks them all, and refuses what is beyond them with the condition
// reason LimitExceeded.
const (
	MaxRules   = 256  // egress rules per policy
	MaxEntries = 1024 // hosts, suffixes and cidrs, each, per rule
	MaxPorts   = 64   // ports per rule
	// MaxPolicyBytes bounds one policy's Size.
	MaxPolicyBytes = 256 << 10
	// MaxPoliciesPerNamespace bounds the EgressPolicies of one namespace
	// the gateway holds (Engine.MaxPerNamespace).
	MaxPoliciesPerNamespace = 64
	// MaxTotalBytes bounds the Size of all policies the gateway holds
	// (Engine.MaxBytes).
	MaxTotalBytes = 16 << 20
	// MaxInterceptSites bounds a policy's intercept sites; each has at
	// most MaxInterceptHosts hosts and exempt names, MaxCredentials
	// credentials and MaxHTTPRules method/path rules.
	MaxInterceptSites = 64
	MaxInterceptHosts = 64
	MaxCredentials    = 8
	MaxHTTPRules      = 64
)

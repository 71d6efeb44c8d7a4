package lint

import (
	"errors"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// ErrUnavailable is returned by a Resolver when it cannot see the object (not
// in the linted input, or no permission). Rules then treat the referenced
// variables as unknown and report an info finding instead of guessing.
var ErrUnavailable = errors.New("object not available")

// ErrNotFound is returned by a Resolver when it knows the object does not
// exist. A non-optional reference to it is an error (the kubelet refuses to
// start the container).
var ErrNotFound = errors.New("object not found")

// Resolver gives the data of the ConfigMaps and Secrets a pod references
// through envFrom and valueFrom. Secret values are returned decoded. A
// Resolver must be safe for concurrent use if CheckPod is called
// concurrently.
type Resolver interface {
	// ConfigMap returns data (and binaryData as strings) of the ConfigMap, or an
	// error wrapping ErrUnavailable or ErrNotFound.
	ConfigMap(namespace, name string) (map[string]string, error)
	// Secret returns the decoded data of the Secret, or an error wrapping
	// ErrUnavailable or ErrNotFound.
	Secret(namespace, name string) (map[string]string, error)
}

// Cluster holds what the rules know about the cluster the pod runs in. The
// zero value checks only what holds in every cluster.
type Cluster struct {
	// Domain is the cluster DNS domain; "" means "cluster.local".
	Domain string
	// CIDRs are the Service and Pod CIDRs a pod's NO_PROXY must cover; nil:
	// not checked.
	CIDRs []netip.Prefix
	// APIServerIPs are the addresses of the kubernetes Service and API server
	// endpoints a pod's NO_PROXY must cover; nil: not checked.
	APIServerIPs []netip.Addr
	// MetadataAddrs are the cloud instance metadata addresses a pod's
	// NO_PROXY must cover. nil means noproxy.DefaultMetadataAddr
	// (169.254.169.254); an empty, non-nil slice checks none (clusters
	// without a metadata service).
	MetadataAddrs []netip.Addr
	// Proxy is the proxy URL pods are expected to use (the sidecar or the
	// gateway Service); "": any proxy is accepted.
	Proxy string
	// InterceptingProxies are proxies (host or host:port) known to
	// intercept TLS with their own CA: a pod that uses one must give each
	// runtime in its image a CA bundle (rule tls-ca-missing). nil: none.
	InterceptingProxies []string
}

// domain returns the cluster domain with its default applied.
func (c Cluster) domain() string {
	if c.Domain == "" {
		return "cluster.local"
	}
	return c.Domain
}

// PodInput is one pod (or pod template) to check: the single-pod front end
// shared by `egret lint` and the admission webhook.
type PodInput struct {
	// Object is the object carrying the pod spec (a Pod, or the Deployment,
	// CronJob, ... whose template it is). Its namespace is used to resolve
	// references; "" means "default".
	Object ObjectRef
	// Spec is the pod spec. CheckPod never modifies it. A nil Spec yields no
	// findings.
	Spec *corev1.PodSpec
	// Annotations are the pod's (or template's) annotations merged with the
	// owner's; `lint.egret.io/ignore: "rule-a,rule-b"` turns rules off.
	Annotations map[string]string
	// FieldPath is the path of Spec inside Object, used to build
	// Finding.Field; "" means "spec" (a Pod).
	FieldPath string
	// Resolver resolves envFrom/valueFrom references; nil: every reference
	// is unavailable (reported as info).
	Resolver Resolver
	// Cluster describes the cluster.
	Cluster Cluster
}

// IgnoreAnnotation lists rule IDs (comma-separated) not to report for an
// object or pod.
const IgnoreAnnotation = "lint.egret.io/ignore"

// InjectedAnnotation marks a pod egret's webhook injected (its value is the
// mode). The variables the webhook adds to every container of such a pod
// (NODE_USE_ENV_PROXY, JAVA_TOOL_OPTIONS) say nothing about what runs in it.
const InjectedAnnotation = "egret.io/injected"

// CheckPod runs every pod rule on one pod and returns the findings, sorted by
// field path then rule. File and Line are left empty. CheckPod is safe for
// concurrent use.
func CheckPod(in PodInput) []Finding {
	if in.Spec == nil {
		return nil
	}
	p := newPod(in)
	runPodRules(p)
	out := p.findings
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Field != out[j].Field {
			return fieldLess(out[i].Field, out[j].Field)
		}
		return out[i].Rule < out[j].Rule
	})
	return out
}

// runPodRules runs the pod rules the pod does not ignore.
func runPodRules(p *pod) {
	for _, r := range rules {
		if r.pod != nil && !p.ignored(r.ID) {
			r.pod(p)
		}
	}
}

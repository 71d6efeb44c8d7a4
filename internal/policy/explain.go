package policy

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/route"
)

// Verdicts of an explanation.
const (
	VerdictAllow     = "allow"
	VerdictDeny      = "deny"
	VerdictWouldDeny = "allow (would_deny)"
)

// Explanation says what the gateway's policies do with one destination of
// one pod.
type Explanation struct {
	Pod            string   `json:"pod"` // namespace/name
	ServiceAccount string   `json:"service_account"`
	Dest           string   `json:"dest"`
	Verdict        string   `json:"verdict"`
	Policy         string   `json:"policy,omitempty"`     // the workload's deciding policy
	Policies       []string `json:"policies,omitempty"`   // every policy that applies, in precedence order
	Rule           string   `json:"rule"`                 // the rule (or default) that decided
	WouldDeny      string   `json:"would_deny,omitempty"` // the report-only rule that would deny
	// Pool is the pool the policy sends the traffic to; "" when the
	// gateway's routes decide (Decision is then Direct).
	Pool     string         `json:"pool,omitempty"`
	Decision route.Decision `json:"-"`
	// Intercept says what the workload's policies do inside the
	// destination's TLS: set when the destination is one of their
	// intercepted sites, or when a method or path was asked about.
	Intercept *InterceptExplanation `json:"intercept,omitempty"`
	site      *intercept.Site
}

// InterceptExplanation is the intercepted side of an explanation.
type InterceptExplanation struct {
	// Intercepted is false when no site of the workload's policies
	// covers the destination (an opaque tunnel: no method or path is
	// seen). The gateway's own sites (its configuration) are not known
	// here, and come first at the gateway.
	Intercepted bool   `json:"intercepted"`
	Site        string `json:"site,omitempty"`
	// Credentials names the Secrets whose values the gateway sets, and
	// the header; never a value (explain reads no Secret).
	Credentials []string `json:"credentials,omitempty"`
	Exempt      []string `json:"exempt,omitempty"`
	Mode        string   `json:"mode,omitempty"`
	// Method and Path are what was asked; Verdict is allow, deny or
	// "allow (would_deny)" under report mode, and Rule the rule that
	// decided ("rule 2", "default"), on the reading of the path in
	// ReadAs; AnyCase is set when that rule matched only with letter case
	// ignored (a deny holds in any case).
	Method  string `json:"method,omitempty"`
	Path    string `json:"path,omitempty"`
	Verdict string `json:"verdict,omitempty"`
	Rule    string `json:"rule,omitempty"`
	ReadAs  string `json:"read_as,omitempty"`
	AnyCase bool   `json:"any_case,omitempty"`
}

// ExplainInput is what Explain reads.
type ExplainInput struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Namespace and Pod name the client.
	Namespace, Pod string
	Dest           route.Dest
	// Resolver resolves names for CIDR rules; nil: names match no CIDR.
	Resolver route.Resolver
	// Pools, when set, checks the pools policies name (the gateway's).
	Pools func(string) bool
	// Method and Path, when set, are judged by the method and path rules
	// of the destination's intercepted site.
	Method, Path string
}

// Explain reads the pod and the policies from the API server and decides
// as the gateway would for a client identified as that pod.
func Explain(ctx context.Context, in ExplainInput) (*Explanation, error) {
	pod, err := in.Kube.CoreV1().Pods(in.Namespace).Get(ctx, in.Pod, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", in.Namespace, in.Pod, err)
	}
	list, err := in.Dynamic.Resource(EgressPolicies).Namespace(in.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list EgressPolicies in %s: %w (is the CRD installed?)", in.Namespace, err)
	}
	var ps, cps []*EgressPolicy
	for i := range list.Items {
		ps = append(ps, FromUnstructured(&list.Items[i]))
	}
	def, err := in.Dynamic.Resource(ClusterEgressPolicies).Get(ctx, DefaultName, metav1.GetOptions{})
	switch {
	case err == nil:
		cps = append(cps, FromUnstructured(def))
	case apierrors.IsNotFound(err):
	default:
		return nil, fmt.Errorf("get ClusterEgressPolicy %s: %w", DefaultName, err)
	}
	ex := ExplainWith(ctx, pod, ps, cps, in.Dest, in.Resolver, in.Pools)
	ex.JudgeHTTP(in.Method, in.Path)
	return ex, nil
}

// ExplainWith decides for pod with the given policies.
func ExplainWith(ctx context.Context, pod *corev1.Pod, ps, cps []*EgressPolicy, dest route.Dest, res route.Resolver, pools func(string) bool) *Explanation {
	// Every Secret is taken as granted (only the gateway knows its
	// intercept.secrets, and it reports a refusal in the status).
	e := &Engine{Pods: identity.NewPods(), Pools: pools, Intercept: validating{}}
	e.Pods.Add(pod)
	e.Replace(ps, cps)
	out := &Explanation{Pod: pod.Namespace + "/" + pod.Name, ServiceAccount: pod.Spec.ServiceAccountName, Dest: dest.String()}
	p := e.Pods.ByName(pod.Namespace, pod.Name)
	eff := e.Effective(p.Labels)
	if eff == nil {
		out.Verdict, out.Rule = VerdictAllow, "no EgressPolicy selects the pod and there is no ClusterEgressPolicy default: the gateway's routes decide"
		out.Decision = route.Decision{Action: route.Direct, Reason: route.ReasonDefault, Rule: route.RuleDefault}
		return out
	}
	dec := eff.Decide(ctx, dest, res)
	out.Decision = dec
	out.Policy, out.Policies = eff.Policy(), eff.Policies()
	out.Rule, out.WouldDeny = dec.Detail(), dec.WouldDeny
	switch {
	case dec.Action == route.Deny:
		out.Verdict = VerdictDeny
	case dec.WouldDeny != "":
		out.Verdict = VerdictWouldDeny
	default:
		out.Verdict = VerdictAllow
	}
	if dec.Action == route.Upstream {
		out.Pool = dec.Pool
	}
	if site := eff.InterceptSite(dest.Host); site != nil && dec.Action != route.Deny {
		ie := &InterceptExplanation{Intercepted: true, Site: site.Name, Mode: site.Rules.Mode.String()}
		for _, c := range site.Credentials {
			ie.Credentials = append(ie.Credentials, c.Header+" from Secret "+c.Name)
		}
		for _, x := range site.Exempt {
			ie.Exempt = append(ie.Exempt, x.String())
		}
		out.Intercept, out.site = ie, site
	}
	return out
}

// JudgeHTTP judges method and path by the rules of the destination's
// intercepted site (nothing when both are empty).
func (ex *Explanation) JudgeHTTP(method, path string) {
	if method == "" && path == "" {
		return
	}
	if ex.Intercept == nil {
		ex.Intercept = &InterceptExplanation{}
	}
	ie := ex.Intercept
	if method == "" {
		method = "GET"
	}
	if path == "" {
		path = "/"
	}
	path, _, _ = strings.Cut(path, "?") // the query is never matched
	ie.Method, ie.Path = strings.ToUpper(method), path
	if ex.site == nil {
		return
	}
	v := ex.site.Rules.Decide(ie.Method, ie.Path)
	ie.Rule, ie.ReadAs, ie.AnyCase = v.RuleName(), v.Path, v.AnyCase
	switch {
	case v.Denied && !v.Allowed:
		ie.Verdict = VerdictDeny
	case v.Denied:
		ie.Verdict = VerdictWouldDeny
	default:
		ie.Verdict = VerdictAllow
	}
}

package policy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"egret.io/egret/internal/identity"
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
	return ExplainWith(ctx, pod, ps, cps, in.Dest, in.Resolver, in.Pools), nil
}

// ExplainWith decides for pod with the given policies.
func ExplainWith(ctx context.Context, pod *corev1.Pod, ps, cps []*EgressPolicy, dest route.Dest, res route.Resolver, pools func(string) bool) *Explanation {
	e := &Engine{Pods: identity.NewPods(), Pools: pools}
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
	return out
}

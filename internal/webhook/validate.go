package webhook

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/lint"
)

// ValidateResult is the outcome of Validate.
type ValidateResult struct {
	// Findings are lint's findings on the pod (info findings left out).
	Findings []lint.Finding
	// Warnings are the admission warnings (one per finding not denied).
	Warnings []string
	// Denied, when set, lists the error findings that refuse the pod
	// (policy enforce).
	Denied string
}

// Validate runs lint's pod rules (the same rules as `egret lint`) on pod.
// With policy warn every finding is a warning; with enforce a finding of
// severity error denies the pod. The namespace annotation
// egret.io/validation overrides the policy. Pods in excluded namespaces, and any pod
// under policy off, pass unchecked.
func Validate(pod *corev1.Pod, in Input) ValidateResult {
	var out ValidateResult
	p := in.Policy
	level, warn := enforcement(in)
	if warn != "" {
		out.Warnings = append(out.Warnings, warn)
	}
	if level == Off || p.Excluded[podNamespace(pod, in.Namespace)] {
		return out
	}
	all := lint.CheckPod(lint.PodInput{
		Object:      lint.ObjectRef{Kind: "Pod", Namespace: podNamespace(pod, in.Namespace), Name: podName(pod)},
		Spec:        &pod.Spec,
		Annotations: pod.Annotations,
		Cluster:     trustCluster(lintCluster(in.Cluster), p),
		// No Resolver: the webhook does not read Secrets (least privilege);
		// values from envFrom/valueFrom are not judged.
	})
	ours := injectedNoProxy(pod, in)
	var denied []string
	for _, f := range all {
		if f.Severity < lint.Warning {
			continue
		}
		// egret's own NO_PROXY holds CIDRs that some runtimes ignore; the
		// egret sidecar or gateway routes those ranges direct, so that is
		// not the pod's problem.
		if f.Rule == "no-proxy-ignored-entry" && ours[f.Container] {
			continue
		}
		out.Findings = append(out.Findings, f)
		msg := findingText(f)
		if level == Enforce && f.Severity >= lint.Error {
			denied = append(denied, msg)
			continue
		}
		out.Warnings = append(out.Warnings, msg)
	}
	if len(denied) > 0 {
		out.Denied = "egret: pod refused (validation enforce):\n" + strings.Join(denied, "\n")
	}
	return out
}

// enforcement is the validation level for a pod in in.Namespace: the
// namespace's ValidationAnnotation, else the policy's. A bad annotation
// keeps the policy's, with a warning.
func enforcement(in Input) (Enforcement, string) {
	level := in.Policy.Validation
	if in.Namespace != nil {
		if v, ok := in.Namespace.Annotations[ValidationAnnotation]; ok {
			l, err := ParseEnforcement(v)
			if err != nil {
				return level, fmt.Sprintf("egret: namespace annotation %s: %v (using %s)", ValidationAnnotation, err, level)
			}
			return l, ""
		}
	}
	return level, ""
}

// injectedNoProxy returns the containers whose NO_PROXY is the one egret
// injects into this pod.
func injectedNoProxy(pod *corev1.Pod, in Input) map[string]bool {
	if pod.Annotations[InjectedAnnotation] == "" || in.Cluster == nil {
		return nil
	}
	adds, _ := discovery.NamespaceAdditions(in.Namespace)
	want := in.Cluster.With(adds).Value()
	out := map[string]bool{}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, e := range c.Env {
				if e.Name == "NO_PROXY" && e.Value == want {
					out[c.Name] = true
				}
			}
		}
	}
	return out
}

func findingText(f lint.Finding) string {
	where := ""
	if f.Container != "" {
		where = " container " + f.Container + ":"
	}
	return fmt.Sprintf("egret [%s]%s %s", f.Rule, where, f.Message)
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	if pod.GenerateName != "" {
		return pod.GenerateName + "*"
	}
	return "(unnamed)"
}

// lintCluster tells lint's rules what this cluster's NO_PROXY must cover.
func lintCluster(r *discovery.Result) lint.Cluster {
	var c lint.Cluster
	if r == nil {
		return c
	}
	// The metadata addresses discovery put in the cluster's NO_PROXY (none
	// when it was told to leave them out); IPv6 ones only in a cluster with
	// IPv6 ranges, since an IPv4-only pod never reaches them.
	c.MetadataAddrs = []netip.Addr{}
	var metadata []netip.Addr
	for _, e := range r.Entries {
		switch e.Kind {
		case discovery.KindServiceCIDR, discovery.KindPodCIDR:
			if p, err := netip.ParsePrefix(e.Value); err == nil {
				c.CIDRs = append(c.CIDRs, p)
			}
		case discovery.KindServiceIP, discovery.KindAPIServer:
			if a, err := netip.ParseAddr(e.Value); err == nil && !a.IsLoopback() {
				c.APIServerIPs = append(c.APIServerIPs, a)
			}
		case discovery.KindMetadata:
			if a, err := netip.ParseAddr(e.Value); err == nil {
				metadata = append(metadata, a)
			}
		case discovery.KindClusterName:
			if strings.HasPrefix(e.Value, ".svc.") {
				c.Domain = strings.TrimPrefix(e.Value, ".svc.")
			}
		}
	}
	v6 := false
	for _, p := range c.CIDRs {
		v6 = v6 || p.Addr().Is6()
	}
	for _, a := range metadata {
		if a.Is4() || v6 {
			c.MetadataAddrs = append(c.MetadataAddrs, a)
		}
	}
	return c
}

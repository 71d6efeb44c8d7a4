package drift

import (
	"cmp"
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"egret.io/egret/internal/stamp"
)

// PodInfo is what Compare reads of a pod: its metadata and the workload
// that owns it.
type PodInfo struct {
	Namespace, Name string
	Annotations     map[string]string
	Workload        Ref
	Created         time.Time
}

// Expect returns what the webhook would inject now into a pod of namespace
// ns stamped s with annotations; false when it is not known (nothing is
// compared then).
type Expect func(ctx context.Context, ns *corev1.Namespace, s stamp.Stamp, annotations map[string]string) (stamp.Current, bool)

// PodExpect is Expect for Compare: by namespace name.
type PodExpect func(ctx context.Context, ns string, s stamp.Stamp, annotations map[string]string) (stamp.Current, bool)

// Compare compares every pod's stamp with expect and returns the report
// (without Restarts): the stale pods, and the workloads they belong to,
// sorted by namespace, kind and name.
func Compare(ctx context.Context, pods []PodInfo, expect PodExpect) *Report {
	r := &Report{InjectedPods: len(pods), ByPart: map[stamp.Part]int{}}
	byRef := map[Ref]*Workload{}
	unknown := false
	for _, p := range pods {
		s, err := stamp.Parse(p.Annotations[stamp.Annotation])
		if err != nil {
			r.Unstamped++
			continue
		}
		cur, ok := expect(ctx, p.Namespace, s, p.Annotations)
		if !ok {
			unknown = true
			continue
		}
		parts := stamp.Compare(s, cur)
		if len(parts) == 0 {
			continue
		}
		r.StalePods++
		for _, part := range parts {
			r.ByPart[part]++
		}
		r.Pods = append(r.Pods, Pod{Namespace: p.Namespace, Name: p.Name, Workload: p.Workload, Mode: s.Mode, Parts: parts, Created: p.Created})
		w := byRef[p.Workload]
		if w == nil {
			w = &Workload{Ref: p.Workload}
			byRef[p.Workload] = w
		}
		w.StalePods++
		w.Parts = unionParts(w.Parts, parts)
	}
	if unknown {
		r.Unknown = append(r.Unknown, "the values the webhook injects (the cluster NO_PROXY is not discovered yet)")
	}
	slices.SortFunc(r.Pods, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	if len(r.Pods) > MaxPods {
		r.MorePods, r.Pods = len(r.Pods)-MaxPods, r.Pods[:MaxPods]
	}
	for _, w := range byRef {
		r.Workloads = append(r.Workloads, *w)
	}
	slices.SortFunc(r.Workloads, func(a, b Workload) int { return compareRefs(a.Ref, b.Ref) })
	if len(r.Workloads) > MaxWorkloads {
		r.MoreWorkloads, r.Workloads = len(r.Workloads)-MaxWorkloads, r.Workloads[:MaxWorkloads]
	}
	return r
}

func compareRefs(a, b Ref) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
}

// unionParts merges b into a, in stamp.Parts order.
func unionParts(a, b []stamp.Part) []stamp.Part {
	var out []stamp.Part
	for _, p := range stamp.Parts {
		if slices.Contains(a, p) || slices.Contains(b, p) {
			out = append(out, p)
		}
	}
	return out
}

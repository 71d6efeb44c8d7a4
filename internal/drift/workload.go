package drift

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/stamp"
)

// RestartedAtAnnotation is the pod template annotation `kubectl rollout
// restart` sets; egret sets the same, so a restart by egret looks like one
// by hand. RestartedForAnnotation says why.
const (
	RestartedAtAnnotation  = "kubectl.kubernetes.io/restartedAt"
	RestartedForAnnotation = "egret.io/restarted-for"
)

// workload is one Deployment, StatefulSet or DaemonSet as the restarter
// reads it.
type workload struct {
	obj      client.Object
	template *corev1.PodTemplateSpec
	// notReady: a rollout in progress or replicas unavailable ("": at rest).
	notReady string
	// unrestartable: an update strategy that does not follow the template.
	unrestartable  string
	maxUnavailable int32
}

// getWorkload reads ref's workload.
func getWorkload(ctx context.Context, r client.Reader, ref Ref) (*workload, error) {
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	switch ref.Kind {
	case "Deployment":
		var d appsv1.Deployment
		if err := r.Get(ctx, key, &d); err != nil {
			return nil, err
		}
		w := &workload{obj: &d, template: &d.Spec.Template}
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		st := d.Status
		switch {
		case st.ObservedGeneration < d.Generation:
			w.notReady = "its last change is not rolled out yet"
		case st.UpdatedReplicas < replicas || st.Replicas > replicas:
			w.notReady = fmt.Sprintf("a rollout is in progress (%d of %d pods updated)", st.UpdatedReplicas, replicas)
		case st.AvailableReplicas < replicas:
			w.notReady = fmt.Sprintf("%d of %d pods available", st.AvailableReplicas, replicas)
		}
		if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
			w.maxUnavailable = replicas
		} else {
			w.maxUnavailable = deploymentMaxUnavailable(&d, replicas)
		}
		return w, nil
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err := r.Get(ctx, key, &s); err != nil {
			return nil, err
		}
		w := &workload{obj: &s, template: &s.Spec.Template}
		replicas := int32(1)
		if s.Spec.Replicas != nil {
			replicas = *s.Spec.Replicas
		}
		st := s.Status
		switch {
		case s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType:
			w.unrestartable = "its update strategy is OnDelete"
		case st.ObservedGeneration < s.Generation:
			w.notReady = "its last change is not rolled out yet"
		case st.UpdatedReplicas < replicas || st.CurrentRevision != st.UpdateRevision:
			w.notReady = fmt.Sprintf("a rollout is in progress (%d of %d pods updated)", st.UpdatedReplicas, replicas)
		case st.AvailableReplicas < replicas:
			w.notReady = fmt.Sprintf("%d of %d pods available", st.AvailableReplicas, replicas)
		}
		w.maxUnavailable = 1
		if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
			w.maxUnavailable = scaled(ru.MaxUnavailable, replicas, 1)
		}
		return w, nil
	case "DaemonSet":
		var ds appsv1.DaemonSet
		if err := r.Get(ctx, key, &ds); err != nil {
			return nil, err
		}
		w := &workload{obj: &ds, template: &ds.Spec.Template}
		st := ds.Status
		switch {
		case ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType:
			w.unrestartable = "its update strategy is OnDelete"
		case st.ObservedGeneration < ds.Generation:
			w.notReady = "its last change is not rolled out yet"
		case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
			w.notReady = fmt.Sprintf("a rollout is in progress (%d of %d pods updated)", st.UpdatedNumberScheduled, st.DesiredNumberScheduled)
		case st.NumberAvailable < st.DesiredNumberScheduled:
			w.notReady = fmt.Sprintf("%d of %d pods available", st.NumberAvailable, st.DesiredNumberScheduled)
		}
		w.maxUnavailable = 1
		if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil {
			if ru.MaxUnavailable != nil {
				w.maxUnavailable = scaled(ru.MaxUnavailable, st.DesiredNumberScheduled, 1)
			}
			if ru.MaxSurge != nil && scaled(ru.MaxSurge, st.DesiredNumberScheduled, 0) > 0 && (ru.MaxUnavailable == nil || scaled(ru.MaxUnavailable, st.DesiredNumberScheduled, 0) == 0) {
				w.maxUnavailable = 0
			}
		}
		return w, nil
	}
	return nil, fmt.Errorf("%s: not a workload egret restarts", ref)
}

// deploymentMaxUnavailable resolves a rolling update's maxUnavailable as
// the Deployment controller does (rounded down; 1 when both it and
// maxSurge are 0).
func deploymentMaxUnavailable(d *appsv1.Deployment, replicas int32) int32 {
	mu, ms := intstr.FromString("25%"), intstr.FromString("25%")
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxUnavailable != nil {
			mu = *ru.MaxUnavailable
		}
		if ru.MaxSurge != nil {
			ms = *ru.MaxSurge
		}
	}
	u, _ := intstr.GetScaledValueFromIntOrPercent(&mu, int(replicas), false)
	s, _ := intstr.GetScaledValueFromIntOrPercent(&ms, int(replicas), true)
	if u == 0 && s == 0 {
		return 1
	}
	return int32(u)
}

func scaled(v *intstr.IntOrString, total int32, def int32) int32 {
	n, err := intstr.GetScaledValueFromIntOrPercent(v, int(total), false)
	if err != nil {
		return def
	}
	if n == 0 && v.Type == intstr.String && def > 0 {
		return 1 // a percentage of few pods still takes one down
	}
	return int32(n)
}

// pdbsFor returns the PodDisruptionBudgets in w's namespace that select
// its pods.
func pdbsFor(ctx context.Context, r client.Reader, w *workload) ([]PDB, error) {
	var l policyv1.PodDisruptionBudgetList
	if err := r.List(ctx, &l, client.InNamespace(w.obj.GetNamespace())); err != nil {
		return nil, fmt.Errorf("list poddisruptionbudgets in %s: %w", w.obj.GetNamespace(), err)
	}
	var out []PDB
	for _, p := range l.Items {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.template.Labels)) {
			continue
		}
		out = append(out, PDB{Name: p.Name, DisruptionsAllowed: p.Status.DisruptionsAllowed})
	}
	return out, nil
}

// restartPatch is the strategic merge patch `kubectl rollout restart`
// makes, with egret's reason beside it.
func restartPatch(now time.Time, parts []stamp.Part) client.Patch {
	reason := "stale:"
	for i, p := range parts {
		if i > 0 {
			reason += ","
		} else {
			reason += " "
		}
		reason += string(p)
	}
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{RestartedAtAnnotation: now.UTC().Format(time.RFC3339), RestartedForAnnotation: reason}}}}})
	return client.RawPatch(types.StrategicMergePatchType, b)
}

func schemeApps(kind string) schema.GroupVersionKind {
	return appsv1.SchemeGroupVersion.WithKind(kind)
}

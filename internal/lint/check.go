package lint

import (
	"errors"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Options configure Check.
type Options struct {
	Cluster Cluster
}

// check is the state of one Check run: the objects sorted by kind and the
// findings so far. Set rules read it.
type check struct {
	opts      Options
	workloads []*workload
	services  []*service
	pdbs      []*pdb
	netpols   []*netpol
	hpas      []*hpa
	data      []*dataObject
	findings  []Finding
}

// dataObject is a ConfigMap or Secret of the input.
type dataObject struct {
	obj  *Object
	kind string // ConfigMap or Secret
	data map[string]string
	ann  map[string]string // the object's annotations (lint.egret.io/ignore)
	// field maps a key to its path in the object (data.KEY or
	// stringData.KEY), for Finding.Field and Line.
	field map[string]string
}

// workload is an object that carries a pod template (or is a Pod).
type workload struct {
	obj      *Object
	ref      ObjectRef
	meta     metav1.ObjectMeta // the object's metadata
	template metav1.ObjectMeta // the pod template's metadata (the Pod's own for a Pod)
	spec     *corev1.PodSpec
	specPath string
	replicas *int32 // Deployment, StatefulSet, ReplicaSet, ReplicationController; nil otherwise
	pod      *pod   // the pod model built for the pod rules
}

type service struct {
	obj *Object
	svc corev1.Service
}

type pdb struct {
	obj *Object
	pdb policyv1.PodDisruptionBudget
}

type netpol struct {
	obj *Object
	np  networkingv1.NetworkPolicy
}

type hpa struct {
	obj *Object
	hpa autoscalingv2.HorizontalPodAutoscaler
}

// Check runs every rule on a set of objects read from manifests: the pod
// rules on each workload's pod template (resolving envFrom/valueFrom from the
// ConfigMaps and Secrets among objs) and the set rules (gateways,
// NetworkPolicy) on the whole set. Findings carry File and Line and are
// sorted by file, line and rule. Objects that cannot be decoded are reported
// in the returned error; the others are still checked.
func Check(objs []Object, opts Options) ([]Finding, error) {
	c := &check{opts: opts}
	store := newStore()
	var errs []error
	for i := range objs {
		o := &objs[i]
		if err := c.add(o, store); err != nil {
			errs = append(errs, &ParseError{File: o.File, Line: o.Line, Err: err})
		}
	}
	for _, w := range c.workloads {
		in := PodInput{
			Object:      w.ref,
			Spec:        w.spec,
			Annotations: mergeMaps(w.meta.Annotations, w.template.Annotations),
			FieldPath:   w.specPath,
			Resolver:    store,
			Cluster:     opts.Cluster,
		}
		w.pod = newPod(in)
		runPodRules(w.pod)
		for _, f := range w.pod.findings {
			f.File, f.Line = w.obj.File, w.obj.LineOf(f.Field)
			c.findings = append(c.findings, f)
		}
	}
	for _, r := range rules {
		if r.set != nil {
			r.set(c)
		}
	}
	c.checkData()
	SortFindings(c.findings)
	return c.findings, errors.Join(errs...)
}

// SortFindings sorts by file, line, object, container and rule.
func SortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		switch {
		case a.File != b.File:
			return a.File < b.File
		case a.Line != b.Line:
			return a.Line < b.Line
		case a.Object != b.Object:
			return a.Object.String() < b.Object.String()
		case a.Field != b.Field:
			return fieldLess(a.Field, b.Field)
		}
		return a.Rule < b.Rule
	})
}

// add sorts one object into the check and the store.
func (c *check) add(o *Object, st *store) error {
	g := o.group()
	switch {
	case g == "" && o.Kind == "ConfigMap":
		var cm corev1.ConfigMap
		if err := o.Decode(&cm); err != nil {
			return err
		}
		data := map[string]string{}
		for k, v := range cm.BinaryData {
			data[k] = string(v)
		}
		for k, v := range cm.Data {
			data[k] = v
		}
		st.put("ConfigMap", o.Namespace, o.Name, data)
		d := &dataObject{obj: o, kind: "ConfigMap", data: data, ann: cm.Annotations, field: map[string]string{}}
		for k := range cm.BinaryData {
			d.field[k] = "binaryData." + k
		}
		for k := range cm.Data {
			d.field[k] = "data." + k
		}
		c.data = append(c.data, d)
	case g == "" && o.Kind == "Secret":
		var s corev1.Secret
		if err := o.Decode(&s); err != nil {
			return err
		}
		data := map[string]string{}
		for k, v := range s.Data {
			data[k] = string(v)
		}
		for k, v := range s.StringData {
			data[k] = v
		}
		st.put("Secret", o.Namespace, o.Name, data)
		d := &dataObject{obj: o, kind: "Secret", data: data, ann: s.Annotations, field: map[string]string{}}
		for k := range s.Data {
			d.field[k] = "data." + k
		}
		for k := range s.StringData {
			d.field[k] = "stringData." + k
		}
		c.data = append(c.data, d)
	case g == "" && o.Kind == "Service":
		s := &service{obj: o}
		if err := o.Decode(&s.svc); err != nil {
			return err
		}
		c.services = append(c.services, s)
	case g == "policy" && o.Kind == "PodDisruptionBudget":
		p := &pdb{obj: o}
		if err := o.Decode(&p.pdb); err != nil {
			return err
		}
		c.pdbs = append(c.pdbs, p)
	case g == "networking.k8s.io" && o.Kind == "NetworkPolicy":
		n := &netpol{obj: o}
		if err := o.Decode(&n.np); err != nil {
			return err
		}
		c.netpols = append(c.netpols, n)
	case g == "autoscaling" && o.Kind == "HorizontalPodAutoscaler":
		h := &hpa{obj: o}
		if err := o.Decode(&h.hpa); err != nil {
			return err
		}
		c.hpas = append(c.hpas, h)
	default:
		w, err := decodeWorkload(o)
		if err != nil || w == nil {
			return err
		}
		c.workloads = append(c.workloads, w)
	}
	return nil
}

// decodeWorkload returns the workload in o, or nil when o carries no pod.
func decodeWorkload(o *Object) (*workload, error) {
	w := &workload{obj: o, ref: o.Ref()}
	g := o.group()
	switch {
	case g == "" && o.Kind == "Pod":
		var p corev1.Pod
		if err := o.Decode(&p); err != nil {
			return nil, err
		}
		w.meta, w.template, w.spec, w.specPath = p.ObjectMeta, p.ObjectMeta, &p.Spec, "spec"
	case g == "" && o.Kind == "PodTemplate":
		var p corev1.PodTemplate
		if err := o.Decode(&p); err != nil {
			return nil, err
		}
		w.meta, w.template, w.spec, w.specPath = p.ObjectMeta, p.Template.ObjectMeta, &p.Template.Spec, "template.spec"
	case g == "" && o.Kind == "ReplicationController":
		var rc corev1.ReplicationController
		if err := o.Decode(&rc); err != nil {
			return nil, err
		}
		if rc.Spec.Template == nil {
			return nil, nil
		}
		w.meta, w.template, w.spec, w.specPath, w.replicas = rc.ObjectMeta, rc.Spec.Template.ObjectMeta, &rc.Spec.Template.Spec, "spec.template.spec", rc.Spec.Replicas
	case (g == "apps" || g == "extensions") && o.Kind == "Deployment":
		var d appsv1.Deployment
		if err := o.Decode(&d); err != nil {
			return nil, err
		}
		w.meta, w.template, w.spec, w.specPath, w.replicas = d.ObjectMeta, d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec, "spec.template.spec", d.Spec.Replicas
	case g == "apps" && o.Kind == "StatefulSet":
		var s appsv1.StatefulSet
		if err := o.Decode(&s); err != nil {
			return nil, err
		}
		w.meta, w.template, w.spec, w.specPath, w.replicas = s.ObjectMeta, s.Spec.Template.ObjectMeta, &s.Spec.Template.Spec, "spec.template.spec", s.Spec.Replicas
	case (g == "apps" || g == "extensions") && o.Kind == "DaemonSet":
		var d appsv1.DaemonSet
		if err := o.Decode(&d); err != nil {
			return nil, err
		}
		w.meta, w.template, w.spec, w.specPath = d.ObjectMeta, d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec, "spec.template.spec"
	case (g == "apps" || g == "extensions") && o.Kind == "ReplicaSet":
		var r appsv1.ReplicaSet
		if err := o.Decode(&r); err != nil {
			return nil, err
		}
		w.meta, w.template, w.spec, w.specPath, w.replicas = r.ObjectMeta, r.Spec.Template.ObjectMeta, &r.Spec.Template.Spec, "spec.template.spec", r.Spec.Replicas
	case g == "batch" && o.Kind == "Job":
		var j batchv1.Job
		if err := o.Decode(&j); err != nil {
			return nil, err
		}
		w.meta, w.template, w.spec, w.specPath = j.ObjectMeta, j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, "spec.template.spec"
	case g == "batch" && o.Kind == "CronJob":
		var j batchv1.CronJob
		if err := o.Decode(&j); err != nil {
			return nil, err
		}
		t := &j.Spec.JobTemplate.Spec.Template
		w.meta, w.template, w.spec, w.specPath = j.ObjectMeta, t.ObjectMeta, &t.Spec, "spec.jobTemplate.spec.template.spec"
	default:
		return nil, nil
	}
	return w, nil
}

// report records a finding from a set rule.
func (c *check) report(id string, sev Severity, obj *Object, field, format string, args ...any) {
	c.findings = append(c.findings, Finding{Rule: id, Severity: sev, Object: obj.Ref(), Field: field,
		Message: fmt.Sprintf(format, args...), File: obj.File, Line: obj.LineOf(field)})
}

func mergeMaps(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if k == IgnoreAnnotation && out[k] != "" {
			v = out[k] + "," + v
		}
		out[k] = v
	}
	return out
}

// store resolves references against the ConfigMaps and Secrets of the input.
// An object that is not in the input is ErrUnavailable (it may exist in the
// cluster).
type store struct {
	objs map[string]map[string]string
}

var _ Resolver = (*store)(nil)

func newStore() *store { return &store{objs: map[string]map[string]string{}} }

func (s *store) put(kind, ns, name string, data map[string]string) {
	s.objs[kind+"/"+qualify(ns, name)] = data
}

func (s *store) get(kind, ns, name string) (map[string]string, error) {
	if d, ok := s.objs[kind+"/"+qualify(ns, name)]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("%s %s: %w", kind, qualify(ns, name), ErrUnavailable)
}

func (s *store) ConfigMap(ns, name string) (map[string]string, error) {
	return s.get("ConfigMap", ns, name)
}

func (s *store) Secret(ns, name string) (map[string]string, error) {
	return s.get("Secret", ns, name)
}

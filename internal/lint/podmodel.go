package lint

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"egret.io/egret/internal/noproxy"
)

// pod is what the pod rules read: the input plus, per container, its
// effective environment and what runs in it.
type pod struct {
	in         PodInput
	ns         string
	containers []*container
	refs       []reference // every envFrom/valueFrom reference that did not resolve
	ignore     map[string]bool
	findings   []Finding
	nplint     map[*envVar][]noproxy.Finding // noproxy.Lint results per NO_PROXY variable
}

// container is one container of the pod with what the rules derive from it.
type container struct {
	c        *corev1.Container
	index    int    // index within its list
	list     string // "containers" or "initContainers"
	field    string // path of the container, e.g. "spec.containers[1]"
	native   bool   // an init container with restartPolicy: Always (a native sidecar)
	env      *environment
	runtimes runtimeSet
	proxy    proxyKind // which proxy runs in it, if any
}

// isInit reports whether the container is in initContainers.
func (c *container) isInit() bool { return c.list == "initContainers" }

func newPod(in PodInput) *pod {
	p := &pod{in: in, ns: in.Object.Namespace, ignore: map[string]bool{}}
	if p.ns == "" {
		p.ns = "default"
	}
	for _, id := range strings.Split(in.Annotations[IgnoreAnnotation], ",") {
		if id = strings.TrimSpace(id); id != "" {
			p.ignore[id] = true
		}
	}
	base := in.FieldPath
	if base == "" {
		base = "spec"
	}
	injected := in.Annotations[InjectedAnnotation] != ""
	add := func(list string, cs []corev1.Container) {
		for i := range cs {
			c := &cs[i]
			ct := &container{c: c, index: i, list: list, field: fmt.Sprintf("%s.%s[%d]", base, list, i)}
			ct.native = list == "initContainers" && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
			ct.env = buildEnv(c, ct.field, p.ns, in.Resolver, &p.refs)
			ct.runtimes = detectRuntimes(c, ct.env, injected)
			ct.proxy = detectProxy(c)
			p.containers = append(p.containers, ct)
		}
	}
	add("initContainers", in.Spec.InitContainers)
	add("containers", in.Spec.Containers)
	return p
}

func (p *pod) ignored(id string) bool { return p.ignore[id] }

// report records a finding about container c (nil: the pod) at field.
func (p *pod) report(id string, sev Severity, c *container, field, format string, args ...any) {
	f := Finding{Rule: id, Severity: sev, Object: p.in.Object, Field: field, Message: fmt.Sprintf(format, args...)}
	if c != nil {
		f.Container = c.c.Name
		if field == "" {
			f.Field = c.field
		}
	}
	p.findings = append(p.findings, f)
}

// clients returns the containers that act as proxy clients: every container
// except the proxies themselves (whose proxy variables configure their
// upstream).
func (p *pod) clients() []*container {
	var out []*container
	for _, c := range p.containers {
		if c.proxy == notProxy {
			out = append(out, c)
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// fieldLess orders field paths naturally: containers[2] before containers[10].
func fieldLess(a, b string) bool {
	for a != "" && b != "" {
		ia, ib := indexDigits(a), indexDigits(b)
		if ia < 0 || ib < 0 || a[:ia] != b[:ib] {
			return a < b
		}
		a, b = a[ia:], b[ib:]
		na, ra := leadingNumber(a)
		nb, rb := leadingNumber(b)
		if na != nb {
			return na < nb
		}
		a, b = ra, rb
	}
	return len(a) < len(b)
}

func indexDigits(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			return i
		}
	}
	return -1
}

func leadingNumber(s string) (int, string) {
	n, i := 0, 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if n < 1<<30 {
			n = n*10 + int(s[i]-'0')
		}
	}
	return n, s[i:]
}

// containerAt returns the container whose path is a prefix of field, or nil.
func (p *pod) containerAt(field string) *container {
	for _, c := range p.containers {
		if strings.HasPrefix(field, c.field+".") || field == c.field {
			return c
		}
	}
	return nil
}

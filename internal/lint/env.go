package lint

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// origin says where an environment variable's value comes from.
type origin int

const (
	fromValue     origin = iota + 1 // a literal `value` in the manifest
	fromConfigMap                   // envFrom/valueFrom of a ConfigMap
	fromSecret                      // envFrom/valueFrom of a Secret
	fromDownward                    // fieldRef / resourceFieldRef / fileKeyRef: known only at run time
)

// envVar is one variable of a container's effective environment.
type envVar struct {
	name   string
	value  string
	raw    string // for fromValue: the value as written, before $(VAR) expansion
	known  bool   // false: the value exists but cannot be seen (unavailable object, downward API)
	origin origin // where the value comes from
	source string // "ConfigMap shop/proxy" for references, "" for literals
	field  string // path of the env or envFrom entry that set it
	// parts say where each byte of a literal value comes from after
	// $(VAR) expansion (fromValue only; nil for the other origins, whose
	// whole value comes from one place).
	parts []part
}

// part is a run of bytes of an expanded value and where it comes from:
// text written in some variable's `value` (owner), or the value of a
// ConfigMap, Secret or downward variable (src). A reference the kubelet
// would expand but whose value lint cannot see (a Secret not in the input)
// stays as written, "$(NAME)", and is attributed to that variable.
type part struct {
	start, end int
	owner      *envVar // literal text: the variable whose value it was written in
	src        *envVar // non-literal: the variable it was taken from
}

// sourceOf returns who supplies byte i of v's value: the variable whose
// literal text it is (literal true), or the ConfigMap/Secret/downward
// variable it was taken from.
func (v *envVar) sourceOf(i int) (from *envVar, literal bool) {
	if v.origin != fromValue {
		return v, false
	}
	for _, p := range v.parts {
		if i >= p.start && i < p.end {
			if p.src != nil {
				return p.src, false
			}
			return p.owner, true
		}
	}
	return v, true
}

// environment is a container's environment as the kubelet builds it:
// envFrom in order, then env in order, later entries overriding earlier ones,
// `$(VAR)` expanded in literal values.
type environment struct {
	vars  map[string]*envVar
	order []string // names in first-set order
	// opaque is true when an envFrom source could not be read: any variable
	// may then be set without us seeing it, so "missing variable" rules stay
	// quiet.
	opaque bool
}

// get returns the variable or nil.
func (e *environment) get(name string) *envVar { return e.vars[name] }

// has reports whether name is set (known or not).
func (e *environment) has(name string) bool { return e.vars[name] != nil }

// mayHave reports whether name is, or may be, set.
func (e *environment) mayHave(name string) bool { return e.has(name) || e.opaque }

func (e *environment) set(v *envVar) {
	if _, ok := e.vars[v.name]; !ok {
		e.order = append(e.order, v.name)
	}
	e.vars[v.name] = v
}

// reference is one envFrom/valueFrom reference a rule may need to report.
type reference struct {
	kind     string // ConfigMap or Secret
	name     string
	key      string // "" for envFrom
	optional bool
	field    string
	err      error // ErrUnavailable, ErrNotFound, errMissingKey or another resolver error
}

var errMissingKey = errors.New("key not found")

// buildEnv computes the environment of container c (at path field) in
// namespace ns and records every reference it could not resolve in refs.
func buildEnv(c *corev1.Container, field, ns string, r Resolver, refs *[]reference) *environment {
	env := &environment{vars: map[string]*envVar{}}
	cms := map[string]lookup{}
	secs := map[string]lookup{}
	get := func(kind, name string) lookup {
		cache := cms
		if kind == "Secret" {
			cache = secs
		}
		if l, ok := cache[name]; ok {
			return l
		}
		var l lookup
		switch {
		case r == nil:
			l.err = ErrUnavailable
		case kind == "Secret":
			l.data, l.err = r.Secret(ns, name)
		default:
			l.data, l.err = r.ConfigMap(ns, name)
		}
		cache[name] = l
		return l
	}
	for i, src := range c.EnvFrom {
		f := fmt.Sprintf("%s.envFrom[%d]", field, i)
		var kind, name string
		var optional bool
		org := fromConfigMap
		switch {
		case src.ConfigMapRef != nil:
			kind, name, optional = "ConfigMap", src.ConfigMapRef.Name, isTrue(src.ConfigMapRef.Optional)
		case src.SecretRef != nil:
			kind, name, optional, org = "Secret", src.SecretRef.Name, isTrue(src.SecretRef.Optional), fromSecret
		default:
			continue
		}
		l := get(kind, name)
		if l.err != nil {
			*refs = append(*refs, reference{kind: kind, name: name, optional: optional, field: f, err: l.err})
			if !errors.Is(l.err, ErrNotFound) {
				env.opaque = true
			}
			continue
		}
		for _, k := range sortedKeys(l.data) {
			env.set(&envVar{name: src.Prefix + k, value: l.data[k], known: true, origin: org,
				source: kind + " " + qualify(ns, name), field: f})
		}
	}
	for i, ev := range c.Env {
		f := fmt.Sprintf("%s.env[%d]", field, i)
		v := &envVar{name: ev.Name, field: f}
		switch vf := ev.ValueFrom; {
		case vf == nil:
			v.raw, v.known, v.origin = ev.Value, true, fromValue
			v.value, v.parts = expandParts(ev.Value, env, v)
		case vf.ConfigMapKeyRef != nil || vf.SecretKeyRef != nil:
			kind, name, key, optional, org := "ConfigMap", "", "", false, fromConfigMap
			if ref := vf.ConfigMapKeyRef; ref != nil {
				name, key, optional = ref.Name, ref.Key, isTrue(ref.Optional)
			} else {
				ref := vf.SecretKeyRef
				kind, name, key, optional, org = "Secret", ref.Name, ref.Key, isTrue(ref.Optional), fromSecret
			}
			v.origin, v.source = org, kind+" "+qualify(ns, name)+" key "+key
			l := get(kind, name)
			if l.err != nil {
				*refs = append(*refs, reference{kind: kind, name: name, key: key, optional: optional, field: f, err: l.err})
				if errors.Is(l.err, ErrNotFound) {
					continue // not set (optional) or the container does not start
				}
				env.set(v) // set, value unknown
				continue
			}
			val, ok := l.data[key]
			if !ok {
				*refs = append(*refs, reference{kind: kind, name: name, key: key, optional: optional, field: f, err: errMissingKey})
				continue
			}
			v.value, v.known = val, true
		default:
			v.origin = fromDownward
		}
		env.set(v)
	}
	return env
}

type lookup struct {
	data map[string]string
	err  error
}

// expand replaces $(NAME) with the value of an earlier variable, as the
// kubelet does (k8s.io/kubernetes third_party/forked/golang/expansion):
// "$$" is one "$"; "$(NAME)" is the value of NAME if it was set earlier in
// the container (envFrom, then env in order); a name not set earlier, an
// unterminated "$(" and any other "$x" stay as written. The value taken is
// the earlier variable's final value (itself already expanded; it is not
// expanded again). A reference to a variable whose value lint cannot see is
// left as written too.
func expand(s string, env *environment) string {
	v, _ := expandParts(s, env, nil)
	return v
}

// expandParts is expand that also says where each byte of the result comes
// from (see part); owner is the variable whose value s is.
func expandParts(s string, env *environment, owner *envVar) (string, []part) {
	var b strings.Builder
	var parts []part
	lit := func(text string) {
		if text == "" {
			return
		}
		start := b.Len()
		b.WriteString(text)
		if n := len(parts); n > 0 && parts[n-1].src == nil && parts[n-1].owner == owner && parts[n-1].end == start {
			parts[n-1].end = b.Len()
			return
		}
		parts = append(parts, part{start: start, end: b.Len(), owner: owner})
	}
	from := func(v *envVar, text string) {
		start := b.Len()
		b.WriteString(text)
		if v.origin == fromValue && v.parts != nil {
			for _, p := range v.parts {
				p.start, p.end = p.start+start, p.end+start
				parts = append(parts, p)
			}
			return
		}
		if text != "" {
			parts = append(parts, part{start: start, end: b.Len(), src: v})
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			lit(s[i : i+1])
			continue
		}
		switch s[i+1] {
		case '$':
			lit("$")
			i++
			continue
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				lit("$")
				continue
			}
			name := s[i+2 : i+2+end]
			ref := s[i : i+3+end]
			switch v := env.get(name); {
			case v != nil && v.known:
				from(v, v.value)
			case v != nil:
				from(v, ref) // set, value unknown: kept as written, attributed to it
			default:
				lit(ref) // not set earlier: the kubelet leaves it as written
			}
			i += 2 + end
			continue
		}
		lit("$")
	}
	return b.String(), parts
}

func isTrue(b *bool) bool { return b != nil && *b }

// qualify returns "ns/name", with "default" for an empty namespace.
func qualify(ns, name string) string {
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + name
}

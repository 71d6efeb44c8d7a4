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
			v.value, v.raw, v.known, v.origin = expand(ev.Value, env), ev.Value, true, fromValue
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
// kubelet does: $$ escapes a $, an unknown or unset name stays as written.
// A reference to a variable whose value is not known is left as written.
func expand(s string, env *environment) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteByte('$')
				continue
			}
			name := s[i+2 : i+2+end]
			if v := env.get(name); v != nil && v.known {
				b.WriteString(v.value)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
			continue
		}
		b.WriteByte('$')
	}
	return b.String()
}

func isTrue(b *bool) bool { return b != nil && *b }

// qualify returns "ns/name", with "default" for an empty namespace.
func qualify(ns, name string) string {
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + name
}

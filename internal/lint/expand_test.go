package lint

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestExpandLikeKubelet checks expand against the kubelet's rules
// (k8s.io/kubernetes third_party/forked/golang/expansion): earlier
// variables only, "$$" escapes, undefined references and unterminated
// ones stay as written, values are not expanded twice.
func TestExpandLikeKubelet(t *testing.T) {
	env := &environment{vars: map[string]*envVar{}}
	for _, v := range []*envVar{
		{name: "VAR_A", value: "A", known: true, origin: fromValue},
		{name: "VAR_B", value: "B", known: true, origin: fromValue},
		{name: "VAR_REF", value: "$(VAR_A)", known: true, origin: fromValue},
		{name: "VAR_EMPTY", value: "", known: true, origin: fromValue},
		{name: "SECRET", known: false, origin: fromSecret},
	} {
		env.set(v)
	}
	for in, want := range map[string]string{
		"$(VAR_A)":               "A",
		"$(VAR_A)-$(VAR_A)":      "A-A",
		"___$(VAR_B)___":         "___B___",
		"$$(VAR_B)_$(VAR_A)":     "$(VAR_B)_A",
		"f000-$$VAR_A":           "f000-$VAR_A",
		"$(VAR_A$(VAR_B))":       "$(VAR_A$(VAR_B))",
		"$(VAR_REF)":             "$(VAR_A)",
		"foo$(VAR_EMPTY)bar":     "foobar",
		"foo$(VAR_Awhoops!":      "foo$(VAR_Awhoops!",
		"$?_boo_$!":              "$?_boo_$!",
		"$VAR_A":                 "$VAR_A",
		"$(VAR_DNE)":             "$(VAR_DNE)",
		"$$$$$$(VAR_A)":          "$$$(VAR_A)",
		"$$$$$$$(VAR_A)":         "$$$A",
		"${VAR_A}":               "${VAR_A}",
		"$(VAR_B)_______$(A":     "B_______$(A",
		"$(VAR_A)foobarzab$":     "Afoobarzab$",
		"--$($($($($--":          "--$($($($($--",
		"$(foo$$var)":            "$(foo$$var)",
		"$()":                    "$()",
		"x$(SECRET)y":            "x$(SECRET)y",
		"http://u:$(SECRET)@h:1": "http://u:$(SECRET)@h:1",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestExpandParts checks where each byte of an expanded value comes from.
func TestExpandParts(t *testing.T) {
	env := &environment{vars: map[string]*envVar{}}
	user := &envVar{name: "PROXY_USER", value: "alice", known: true, origin: fromSecret, source: "Secret shop/proxy key user"}
	pass := &envVar{name: "PROXY_PASS", known: false, origin: fromSecret, source: "Secret shop/proxy key pass"}
	env.set(user)
	env.set(pass)
	v := &envVar{name: "HTTPS_PROXY", origin: fromValue, known: true}
	v.value, v.parts = expandParts("http://$(PROXY_USER):$(PROXY_PASS)@gate:8080", env, v)
	if v.value != "http://alice:$(PROXY_PASS)@gate:8080" {
		t.Fatalf("value %q", v.value)
	}
	for i := range v.value {
		from, literal := v.sourceOf(i)
		var want *envVar
		wantLit := false
		switch {
		case i >= len("http://") && i < len("http://alice"):
			want = user
		case strings.Index(v.value, "$(PROXY_PASS)") <= i && i < strings.Index(v.value, "@"):
			want = pass
		default:
			want, wantLit = v, true
		}
		if from != want || literal != wantLit {
			t.Errorf("byte %d %q: from %s literal %v, want %s literal %v", i, v.value[i], from.name, literal, want.name, wantLit)
		}
	}
}

// TestDependentVariables is the pattern the guides recommend: the proxy URL
// built with $(VAR) from a user name and password kept in a Secret.
func TestDependentVariables(t *testing.T) {
	secretRef := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "proxy-creds"}, Key: key}}}
	}
	cmRef := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "proxy-cfg"}, Key: key}}}
	}
	pod := func(url string, extra ...corev1.EnvVar) corev1.PodSpec {
		e := []corev1.EnvVar{secretRef("PROXY_USER", "user"), secretRef("PROXY_PASS", "pass")}
		e = append(e, extra...)
		e = append(e, allCases(url, goodNP)...)
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox", Env: e}}}
	}
	const built = "http://$(PROXY_USER):$(PROXY_PASS)@gate.corp.example:8080"
	secrets := func(user, pass string) Resolver {
		return mapResolver{secrets: map[string]map[string]string{"default/proxy-creds": {"user": user, "pass": pass}}}
	}
	tests := []struct {
		name     string
		spec     corev1.PodSpec
		res      Resolver
		want     []string // these rules report
		wantNot  []string // these do not
		wantIn   string
		wantNone string // no message may contain this (a secret value)
	}{
		{name: "secret-parts-not-plain", spec: pod(built), res: secrets("alice", "s3cret"),
			wantNot: []string{idCredentialsInValue, idURLUnencoded}, wantNone: "s3cret"},
		{name: "secret-not-in-input", spec: pod(built), res: nil,
			wantNot: []string{idCredentialsInValue, idURLUnencoded}},
		{name: "secret-value-with-at", spec: pod(built), res: secrets("alice", "p@ss"),
			want: []string{idURLUnencoded}, wantNot: []string{idCredentialsInValue},
			wantIn: "the characters come from PROXY_PASS (Secret default/proxy-creds key pass)", wantNone: "p@ss"},
		{name: "secret-user-with-slash", spec: pod(built), res: secrets("corp/alice", "pw"),
			want: []string{idURLUnencoded}, wantIn: "PROXY_USER (Secret default/proxy-creds key user)"},
		{name: "literal-password-with-secret-user", spec: pod("http://$(PROXY_USER):hunter2@gate.corp.example:8080"), res: secrets("alice", "x"),
			want: []string{idCredentialsInValue}, wantIn: "HTTP_PROXY carries a user name and password as a plain value"},
		{name: "password-from-configmap", spec: pod("http://$(PROXY_USER):$(CM_PASS)@gate.corp.example:8080", cmRef("CM_PASS", "pass")),
			res: mapResolver{secrets: map[string]map[string]string{"default/proxy-creds": {"user": "alice", "pass": "x"}},
				cms: map[string]map[string]string{"default/proxy-cfg": {"pass": "pw"}}},
			want: []string{idCredentialsInValue}, wantIn: "from CM_PASS in ConfigMap default/proxy-cfg key pass"},
		{name: "escaped-reference-is-literal", spec: pod("http://$(PROXY_USER):$$(PROXY_PASS)@gate.corp.example:8080"), res: secrets("alice", "x"),
			want: []string{idCredentialsInValue}},
		{name: "later-variable-not-expanded", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox",
			Env: append(allCases("http://alice:$(LATE)@gate.corp.example:8080", goodNP), secretRef("LATE", "pass"))}}}, res: secrets("a", "b"),
			want: []string{idCredentialsInValue}, wantIn: "$(LATE) stays as written: the kubelet expands only variables set earlier"},
		{name: "undefined-reference-stays-literal", spec: pod("http://$(PROXY_USER):$(NOPE)@gate.corp.example:8080"), res: secrets("alice", "x"),
			want: []string{idCredentialsInValue}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := CheckPod(PodInput{Object: ObjectRef{Kind: "Pod", Namespace: "default", Name: "p"}, Spec: &tc.spec, Resolver: tc.res})
			got := map[string]bool{}
			for _, f := range fs {
				got[f.Rule] = true
				if tc.wantNone != "" && strings.Contains(f.Message, tc.wantNone) {
					t.Errorf("a message shows the secret value %q: %s", tc.wantNone, f.Message)
				}
			}
			for _, id := range tc.want {
				if !got[id] {
					t.Errorf("no %s finding; got %v", id, messages(fs))
				}
			}
			for _, id := range tc.wantNot {
				if got[id] {
					t.Errorf("unexpected %s finding: %v", id, messages(fs))
				}
			}
			if tc.wantIn != "" && !strings.Contains(strings.Join(messages(fs), "\n"), tc.wantIn) {
				t.Errorf("no message contains %q: %v", tc.wantIn, messages(fs))
			}
		})
	}
}

func messages(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Rule+": "+f.Message)
	}
	return out
}

// FuzzExpand checks expandParts on any value: no panic, the parts cover
// the result exactly and in order, and the result without parts is expand's.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{"http://$(PROXY_USER):$(PROXY_PASS)@gate:8080", "$$(X)", "$(", "$(A$(B))", "a$", "$()", "$(UNKNOWN)x", "$(SECRET)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		env := &environment{vars: map[string]*envVar{}}
		env.set(&envVar{name: "PROXY_USER", value: "u$(X)", known: true, origin: fromSecret})
		env.set(&envVar{name: "SECRET", known: false, origin: fromSecret})
		lit := &envVar{name: "LIT", known: true, origin: fromValue}
		lit.value, lit.parts = expandParts("p@ss", env, lit)
		env.set(lit)
		v := &envVar{name: "V", origin: fromValue, known: true}
		v.value, v.parts = expandParts(s, env, v)
		if v.value != expand(s, env) {
			t.Fatalf("expandParts and expand differ on %q", s)
		}
		end := 0
		for _, p := range v.parts {
			if p.start != end || p.end <= p.start || p.end > len(v.value) || (p.owner == nil) == (p.src == nil) {
				t.Fatalf("%q: bad part %+v after %d in %q", s, p, end, v.value)
			}
			end = p.end
		}
		if end != len(v.value) {
			t.Fatalf("%q: parts end at %d of %d", s, end, len(v.value))
		}
		_ = badUserinfoBytes(v.value)
		_, _, _, _ = userinfoSpan(v.value)
	})
}

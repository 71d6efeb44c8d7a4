package webhook

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	goldenfile "egret.io/egret/internal/testutil/golden"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/discovery"
)

func testCluster() *discovery.Result {
	return discovery.Compute(discovery.Inputs{
		ServiceCIDRs:         map[string][]netip.Prefix{"kubernetes": {netip.MustParsePrefix("10.96.0.0/16")}},
		NodePodCIDRs:         map[string][]netip.Prefix{"n1": {netip.MustParsePrefix("10.244.0.0/24")}, "n2": {netip.MustParsePrefix("10.244.1.0/24")}},
		KubernetesServiceIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")},
		APIServerAddrs:       map[string][]netip.Addr{"kubernetes": {netip.MustParseAddr("172.18.0.2")}},
	}, discovery.Options{})
}

func testPolicy(t testing.TB, mut func(*Config)) *Policy {
	t.Helper()
	c := Config{Mode: "gateway", GatewayURL: "http://egret-gateway.egret-system.svc:3128",
		Image: "egret:test", Validation: "warn", NativeSidecars: true}
	if mut != nil {
		mut(&c)
	}
	p, err := c.Compile("egret-system")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ns(name string, labels, annotations map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations}}
}

var optedIn = map[string]string{discovery.InjectLabel: discovery.InjectEnabled}

func pod(annotations map[string]string, env ...corev1.EnvVar) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "shop", Annotations: annotations},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "migrate", Image: "migrate:1"}},
			Containers:     []corev1.Container{{Name: "app", Image: "app:1", Env: env}, {Name: "worker", Image: "worker:1"}},
		},
	}
}

func env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func TestMutate(t *testing.T) {
	cluster := testCluster()
	tests := []struct {
		name     string
		pod      *corev1.Pod
		ns       *corev1.Namespace
		policy   func(*Config)
		cluster  *discovery.Result
		golden   bool   // compare the mutated pod with testdata/<name>.golden.yaml
		mode     Mode   // 0: not injected
		skipped  string // substring of Skipped
		denied   string // substring of Denied
		warnings []string
	}{
		{name: "unlabelled-namespace-untouched", pod: pod(nil), ns: ns("shop", nil, nil), skipped: "not opted in"},
		{name: "gateway", pod: pod(nil), ns: ns("shop", optedIn, nil), mode: Gateway, golden: true},
		{name: "pod-annotation-opts-in", pod: pod(map[string]string{InjectAnnotation: "true"}), ns: ns("shop", nil, nil), mode: Gateway},
		{name: "pod-annotation-opts-out", pod: pod(map[string]string{InjectAnnotation: "false"}), ns: ns("shop", optedIn, nil), skipped: "=false"},
		{name: "pod-label-opts-in", pod: func() *corev1.Pod { p := pod(nil); p.Labels = map[string]string{InjectAnnotation: "true"}; return p }(), ns: ns("shop", nil, nil), mode: Gateway},
		{name: "pod-label-opts-out", pod: func() *corev1.Pod { p := pod(nil); p.Labels = map[string]string{InjectAnnotation: "false"}; return p }(), ns: ns("shop", optedIn, nil), skipped: "pod label egret.io/inject=false"},
		{
			name:   "transparent-refused-under-pod-security-baseline",
			pod:    pod(map[string]string{ModeAnnotation: "transparent"}),
			ns:     ns("shop", map[string]string{discovery.InjectLabel: discovery.InjectEnabled, "pod-security.kubernetes.io/enforce": "baseline"}, nil),
			denied: `namespace shop's Pod Security level "baseline" (label pod-security.kubernetes.io/enforce) forbids. Use egret.io/mode: gateway or sidecar, with a NetworkPolicy`,
		},
		{name: "transparent-under-privileged", pod: pod(map[string]string{ModeAnnotation: "transparent"}),
			ns: ns("shop", map[string]string{discovery.InjectLabel: discovery.InjectEnabled, "pod-security.kubernetes.io/enforce": "privileged"}, nil), mode: Transparent},
		{name: "kube-system-never", pod: pod(map[string]string{InjectAnnotation: "true"}), ns: ns("kube-system", optedIn, nil), skipped: "excluded"},
		{name: "own-namespace-never", pod: pod(map[string]string{InjectAnnotation: "true"}), ns: ns("egret-system", optedIn, nil), skipped: "excluded"},
		{name: "not-discovered-yet", pod: pod(nil), ns: ns("shop", optedIn, nil), cluster: &discovery.Result{}, skipped: "not discovered", warnings: []string{"not discovered yet"}},
		{
			name: "user-values-kept-with-warnings",
			pod: pod(nil,
				corev1.EnvVar{Name: "NO_PROXY", Value: "localhost"},
				corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://bob:s3cret@corp-proxy:8080"},
				corev1.EnvVar{Name: "HTTP_PROXY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "url", LocalObjectReference: corev1.LocalObjectReference{Name: "proxy"}}}},
				corev1.EnvVar{Name: "JAVA_TOOL_OPTIONS", Value: "-Xmx512m -Dhttp.proxyHost=corp-proxy"},
			),
			ns: ns("shop", optedIn, nil), mode: Gateway, golden: true,
			warnings: []string{
				"container app: kept your NO_PROXY; it lacks 127.0.0.1,::1,[::1],kubernetes,",
				"container app: kept your HTTPS_PROXY=http://bob:xxxxx@corp-proxy:8080 (egret would set http://egret-gateway.egret-system.svc:3128)",
				"container app: kept your -Dhttp.proxyHost in JAVA_TOOL_OPTIONS",
			},
		},
		{
			name: "conflicts-grouped-per-variable",
			pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "a", Env: []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "http://other:1"}}},
				{Name: "b", Env: []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "http://other:1"}}},
			}}},
			ns: ns("shop", optedIn, nil), mode: Gateway,
			warnings: []string{"container a, b: kept your HTTP_PROXY=http://other:1"},
		},
		{name: "sidecar", pod: pod(map[string]string{ModeAnnotation: "sidecar"}), ns: ns("shop", optedIn, nil), mode: Sidecar, golden: true},
		{
			name: "transparent-with-namespace-additions-and-secret",
			pod:  pod(nil),
			ns:   ns("shop", optedIn, map[string]string{ModeAnnotation: "transparent", discovery.NoProxyAnnotation: "db.corp,10.50.0.0/16"}),
			policy: func(c *Config) {
				c.UpstreamSecret = "egret-upstream"
				c.IptablesImage = "egret-iptables:test"
			},
			mode: Transparent, golden: true,
		},
		{
			name: "no-native-sidecars-falls-back-to-gateway",
			pod:  pod(map[string]string{ModeAnnotation: "sidecar"}), ns: ns("shop", optedIn, nil),
			policy:   func(c *Config) { c.NativeSidecars = false },
			mode:     Gateway,
			warnings: []string{"sidecar mode needs native sidecars (Kubernetes 1.29 or later); using the gateway egret-gateway.egret-system.svc:3128 instead"},
		},
		{
			name: "no-native-sidecars-refused",
			pod:  pod(map[string]string{ModeAnnotation: "sidecar"}), ns: ns("shop", optedIn, nil),
			policy: func(c *Config) { c.NativeSidecars = false; c.Fallback = "refuse" },
			denied: "needs native sidecars (Kubernetes 1.29 or later)",
		},
		{name: "bad-mode-annotation", pod: pod(map[string]string{ModeAnnotation: "magic"}), ns: ns("shop", optedIn, nil), denied: `mode "magic"`},
		{
			name: "bad-namespace-additions-warned",
			pod:  pod(nil), ns: ns("shop", optedIn, map[string]string{discovery.NoProxyAnnotation: "ok.corp,bad;x"}),
			mode: Gateway, warnings: []string{`annotation egret.io/no-proxy: namespace/shop: entry "bad;x"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Policy: testPolicy(t, tt.policy), Namespace: tt.ns, Cluster: cluster}
			if tt.cluster != nil {
				in.Cluster = nil
			}
			orig := tt.pod.DeepCopy()
			res := Mutate(tt.pod, in)
			if !equality.Semantic.DeepEqual(orig, tt.pod) {
				t.Fatal("Mutate changed its input")
			}
			if res.Mode != tt.mode {
				t.Errorf("mode = %v, want %v", res.Mode, tt.mode)
			}
			if !strings.Contains(res.Skipped, tt.skipped) || (tt.skipped == "" && res.Skipped != "") {
				t.Errorf("skipped = %q, want %q", res.Skipped, tt.skipped)
			}
			if !strings.Contains(res.Denied, tt.denied) || (tt.denied == "" && res.Denied != "") {
				t.Errorf("denied = %q, want %q", res.Denied, tt.denied)
			}
			if len(res.Warnings) != len(tt.warnings) {
				t.Errorf("warnings = %q, want %d", res.Warnings, len(tt.warnings))
			}
			for _, w := range tt.warnings {
				if !slices.ContainsFunc(res.Warnings, func(s string) bool { return strings.Contains(s, w) }) {
					t.Errorf("no warning with %q in %q", w, res.Warnings)
				}
			}
			for _, w := range res.Warnings {
				if strings.Contains(w, "s3cret") {
					t.Errorf("warning leaks a password: %s", w)
				}
				if len(w) > 256 {
					t.Errorf("warning longer than the API server keeps (256): %s", w)
				}
			}
			if tt.mode != 0 {
				checkInjected(t, res.Pod, tt.pod)
				again := Mutate(res.Pod, in)
				if !equality.Semantic.DeepEqual(again.Pod, res.Pod) {
					t.Errorf("not idempotent: second Mutate changed the pod")
				}
				if tt.name != "bad-namespace-additions-warned" && len(again.Warnings) > len(tt.warnings) {
					t.Errorf("second Mutate added warnings: %q", again.Warnings)
				}
			} else if !equality.Semantic.DeepEqual(res.Pod, tt.pod) {
				t.Errorf("pod changed although not injected")
			}
			if tt.golden {
				b, err := yaml.Marshal(res.Pod)
				if err != nil {
					t.Fatal(err)
				}
				golden(t, tt.name+".golden.yaml", b)
			}
		})
	}
}

// checkInjected: every app container has both cases, the same value in
// both, NODE_USE_ENV_PROXY and the JVM properties, unless the user set them.
func checkInjected(t *testing.T, got, orig *corev1.Pod) {
	t.Helper()
	var all []corev1.Container
	for _, c := range got.Spec.InitContainers {
		if c.Name != SidecarName && c.Name != IptablesName {
			all = append(all, c)
		}
	}
	all = append(all, got.Spec.Containers...)
	for _, c := range all {
		for _, pair := range [][2]string{{"HTTP_PROXY", "http_proxy"}, {"HTTPS_PROXY", "https_proxy"}, {"NO_PROXY", "no_proxy"}} {
			_, up := env(c, pair[0])
			_, low := env(c, pair[1])
			if !up || !low {
				t.Errorf("container %s: %s/%s not both set", c.Name, pair[0], pair[1])
			}
		}
		if v, _ := env(c, "NODE_USE_ENV_PROXY"); v != "1" {
			t.Errorf("container %s: NODE_USE_ENV_PROXY=%q", c.Name, v)
		}
		if v, _ := env(c, "JAVA_TOOL_OPTIONS"); !strings.Contains(v, "-Dhttp.nonProxyHosts=localhost|") || !strings.Contains(v, "|127.0.0.1|[::1]|kubernetes|") || !strings.Contains(v, "|*.svc|") || !strings.Contains(v, "-Dhttps.proxyPort=") {
			t.Errorf("container %s: JAVA_TOOL_OPTIONS=%q", c.Name, v)
		}
	}
}

func TestMutateNoProxyHoldsClusterRanges(t *testing.T) {
	res := Mutate(pod(nil), Input{Policy: testPolicy(t, nil), Namespace: ns("shop", optedIn, nil), Cluster: testCluster()})
	v, _ := env(res.Pod.Spec.Containers[0], "NO_PROXY")
	for _, want := range []string{"10.96.0.0/16", "10.244.0.0/23", "10.96.0.1", "172.18.0.2", ".svc", ".cluster.local", "kubernetes.default.svc", "169.254.169.254"} {
		if !slices.Contains(strings.Split(v, ","), want) {
			t.Errorf("NO_PROXY lacks %s: %s", want, v)
		}
	}
	j, _ := env(res.Pod.Spec.Containers[0], "JAVA_TOOL_OPTIONS")
	// 10.244.0.0/23 -> two octet wildcards; 10.96.0.0/16 -> one.
	for _, want := range []string{"|10.96.*|", "|10.244.0.*|10.244.1.*|", "|*.svc|", "|*.cluster.local|", "-Dhttp.proxyHost=egret-gateway.egret-system.svc "} {
		if !strings.Contains(j, want) {
			t.Errorf("JAVA_TOOL_OPTIONS lacks %q: %s", want, j)
		}
	}
}

func TestOptedIn(t *testing.T) {
	p := testPolicy(t, func(c *Config) { c.ExcludedNamespaces = []string{"ops"} })
	tests := []struct {
		name string
		ann  map[string]string
		ns   *corev1.Namespace
		want bool
	}{
		{"label", nil, ns("a", optedIn, nil), true},
		{"label-other-value", nil, ns("a", map[string]string{discovery.InjectLabel: "disabled"}, nil), false},
		{"annotation-true", map[string]string{InjectAnnotation: "true"}, ns("a", nil, nil), true},
		{"annotation-false-wins", map[string]string{InjectAnnotation: "false"}, ns("a", optedIn, nil), false},
		{"excluded-flag", map[string]string{InjectAnnotation: "true"}, ns("ops", optedIn, nil), false},
		{"no-namespace-object", nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := OptedIn(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Annotations: tt.ann}}, tt.ns, p)
			if got != tt.want || why == "" {
				t.Errorf("OptedIn = %v (%s), want %v", got, why, tt.want)
			}
		})
	}
}

func TestConfigCompile(t *testing.T) {
	tests := []struct {
		name    string
		c       Config
		wantErr string
	}{
		{"gateway", Config{GatewayURL: "http://gw.egret.svc:3128"}, ""},
		{"sidecar", Config{Mode: "sidecar", Image: "egret:1"}, ""},
		{"gateway-needs-url", Config{}, "needs --gateway-url"},
		{"sidecar-needs-image", Config{Mode: "sidecar"}, "needs --image"},
		{"gateway-with-credentials", Config{GatewayURL: "http://u:p@gw:3128"}, "no credentials"},
		{"gateway-without-port", Config{GatewayURL: "http://gw"}, "want http://host:port"},
		{"bad-mode", Config{Mode: "mesh", Image: "x"}, `mode "mesh"`},
		{"transparent-digest-needs-iptables-image", Config{Mode: "transparent", Image: "egret@sha256:abc"}, "set --iptables-image"},
		{"transparent-digest-with-iptables-image", Config{Mode: "transparent", Image: "egret@sha256:abc", IptablesImage: "egret@sha256:def"}, ""},
		{"bad-validation", Config{GatewayURL: "http://gw:1", Validation: "strict"}, `validation "strict"`},
		{"bad-fallback", Config{GatewayURL: "http://gw:1", Fallback: "maybe"}, `fallback "maybe"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.c.Compile("egret-system")
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if err == nil && (!p.Excluded["kube-system"] || !p.Excluded["egret-system"] || p.Validation != Warn) {
				t.Errorf("defaults: %+v", p)
			}
			if strings.Contains(tt.name, "credentials") && strings.Contains(err.Error(), ":p@") {
				t.Errorf("error leaks the password: %v", err)
			}
		})
	}
}

// FuzzMutate: whatever the user's env holds, Mutate never panics, keeps
// every user value, and a second pass changes nothing.
func FuzzMutate(f *testing.F) {
	f.Add("NO_PROXY", "localhost", "JAVA_TOOL_OPTIONS", "-Xmx1g -Dhttp.proxyHost=x")
	f.Add("HTTP_PROXY", "http://u:p@h:1", "http_proxy", "")
	f.Add("JAVA_TOOL_OPTIONS", "-Dhttp.nonProxyHosts=", "no_proxy", ".svc")
	p := testPolicy(f, func(c *Config) { c.Mode = "transparent" })
	cluster := testCluster()
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		if n1 == "" || n2 == "" || n1 == n2 {
			return
		}
		in := Input{Policy: p, Namespace: ns("shop", optedIn, nil), Cluster: cluster}
		pd := pod(nil, corev1.EnvVar{Name: n1, Value: v1}, corev1.EnvVar{Name: n2, Value: v2})
		res := Mutate(pd, in)
		c := res.Pod.Spec.Containers[0]
		for _, kv := range [][2]string{{n1, v1}, {n2, v2}} {
			got, _ := env(c, kv[0])
			if kv[0] == "JAVA_TOOL_OPTIONS" {
				if !strings.HasPrefix(got, kv[1]) {
					t.Fatalf("JAVA_TOOL_OPTIONS %q does not keep %q", got, kv[1])
				}
			} else if got != kv[1] {
				t.Fatalf("%s = %q, user set %q", kv[0], got, kv[1])
			}
		}
		again := Mutate(res.Pod, in)
		if !equality.Semantic.DeepEqual(again.Pod, res.Pod) {
			t.Fatalf("not idempotent for %s=%q %s=%q", n1, v1, n2, v2)
		}
	})
}

func TestIptablesVariant(t *testing.T) {
	for image, want := range map[string]string{
		"ghcr.io/egret-io/egret:0.1.0":    "ghcr.io/egret-io/egret:0.1.0-iptables",
		"ghcr.io/egret-io/egret":          "ghcr.io/egret-io/egret:latest-iptables",
		"registry.local:5000/egret":       "registry.local:5000/egret:latest-iptables",
		"registry.local:5000/egret:1.2.3": "registry.local:5000/egret:1.2.3-iptables",
		"egret@sha256:abc":                "",
	} {
		got, err := iptablesVariant(image)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("iptablesVariant(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
	// A namespace that asks for transparent mode when the webhook's image
	// is pinned by digest and no --iptables-image is set: denied with the
	// reason, not a pod with an empty image.
	p, err := Config{GatewayURL: "http://gw:3128", Image: "egret@sha256:abc", NativeSidecars: true}.Compile("egret-system")
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "shop",
		Annotations: map[string]string{InjectAnnotation: "true", ModeAnnotation: "transparent"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	res := Mutate(pod, Input{Policy: p, Cluster: &discovery.Result{}})
	if !strings.Contains(res.Denied, "--iptables-image") {
		t.Errorf("Denied = %q, want the --iptables-image advice", res.Denied)
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

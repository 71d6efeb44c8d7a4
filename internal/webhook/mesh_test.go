package webhook

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/stamp"
)

func TestDetectMesh(t *testing.T) {
	withContainer := func(init bool, name string) *corev1.Pod {
		p := pod(nil)
		c := corev1.Container{Name: name, Image: "mesh:1"}
		if init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		return p
	}
	withLabels := func(labels, ann map[string]string) *corev1.Pod {
		p := pod(ann)
		p.Labels = labels
		return p
	}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		ns      *corev1.Namespace
		mesh    string // "" = none
		why     string
		ambient bool
	}{
		{name: "none", pod: pod(nil), ns: ns("shop", optedIn, nil)},
		{name: "istio-proxy-container", pod: withContainer(false, "istio-proxy"), mesh: "istio", why: "container istio-proxy"},
		{name: "istio-native-sidecar", pod: withContainer(true, "istio-proxy"), mesh: "istio"},
		{name: "istio-init", pod: withContainer(true, "istio-init"), mesh: "istio"},
		{name: "istio-namespace-label", pod: pod(nil), ns: ns("shop", map[string]string{"istio-injection": "enabled"}, nil), mesh: "istio", why: "namespace label istio-injection=enabled"},
		{name: "istio-revision-label", pod: pod(nil), ns: ns("shop", map[string]string{"istio.io/rev": "1-24"}, nil), mesh: "istio", why: "istio.io/rev=1-24"},
		{name: "istio-pod-label", pod: withLabels(map[string]string{"sidecar.istio.io/inject": "true"}, nil), mesh: "istio"},
		{name: "istio-pod-annotation", pod: withLabels(nil, map[string]string{"sidecar.istio.io/inject": "true"}), mesh: "istio"},
		{name: "istio-pod-opts-out", pod: withLabels(map[string]string{"sidecar.istio.io/inject": "false"}, nil),
			ns: ns("shop", map[string]string{"istio-injection": "enabled"}, nil)},
		{name: "istio-namespace-disabled", pod: pod(nil), ns: ns("shop", map[string]string{"istio-injection": "disabled", "istio.io/rev": "x"}, nil)},
		{name: "istio-ambient", pod: pod(nil), ns: ns("shop", map[string]string{"istio.io/dataplane-mode": "ambient"}, nil), mesh: "istio", ambient: true},
		{name: "istio-ambient-pod-out", pod: withLabels(map[string]string{"istio.io/dataplane-mode": "none"}, nil), ns: ns("shop", map[string]string{"istio.io/dataplane-mode": "ambient"}, nil)},
		{name: "linkerd-proxy", pod: withContainer(false, "linkerd-proxy"), mesh: "linkerd"},
		{name: "linkerd-init", pod: withContainer(true, "linkerd-init"), mesh: "linkerd"},
		{name: "linkerd-namespace", pod: pod(nil), ns: ns("shop", nil, map[string]string{"linkerd.io/inject": "enabled"}), mesh: "linkerd", why: "namespace annotation linkerd.io/inject=enabled"},
		{name: "linkerd-pod", pod: pod(map[string]string{"linkerd.io/inject": "ingress"}), mesh: "linkerd"},
		{name: "linkerd-pod-disabled", pod: pod(map[string]string{"linkerd.io/inject": "disabled"}), ns: ns("shop", nil, map[string]string{"linkerd.io/inject": "enabled"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := DetectMesh(tc.pod, tc.ns)
			switch {
			case tc.mesh == "" && m != nil:
				t.Fatalf("found %+v", m)
			case tc.mesh == "":
			case m == nil || m.Name != tc.mesh || m.Ambient != tc.ambient || !strings.Contains(m.Why, tc.why):
				t.Fatalf("found %+v, want %s (%q)", m, tc.mesh, tc.why)
			}
		})
	}
}

// TestMutateBesideAMesh: the sidecar's UID is not istio-proxy's, the
// choice between refusing transparent mode and excluding the mesh proxy,
// per flag, namespace and pod, and the rules the init container gets.
func TestMutateBesideAMesh(t *testing.T) {
	istioNS := ns("shop", map[string]string{discovery.InjectLabel: discovery.InjectEnabled, "istio-injection": "enabled"}, nil)
	linkerdNS := ns("shop", optedIn, map[string]string{"linkerd.io/inject": "enabled"})
	transparent := func(ann map[string]string) *corev1.Pod {
		a := map[string]string{ModeAnnotation: "transparent"}
		for k, v := range ann {
			a[k] = v
		}
		return pod(a)
	}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		ns      *corev1.Namespace
		policy  func(*Config)
		denied  string
		uid     int64
		args    []string // in the iptables init container, in order
		port    string   // the sidecar's transparent listener
		mesh    string
		warning string
	}{
		{name: "default-uid-is-not-istios", pod: transparent(nil), ns: ns("shop", optedIn, nil), uid: 15337,
			args: []string{"--proxy-uid", "15337", "--redirect-port", "15001"}, port: "127.0.0.1:15001"},
		{name: "flag-uid", pod: transparent(nil), ns: ns("shop", optedIn, nil), policy: func(c *Config) { c.SidecarUID = 4242 }, uid: 4242,
			args: []string{"--proxy-uid", "4242"}},
		{name: "pod-uid", pod: transparent(map[string]string{SidecarUIDAnnotation: "7000"}), ns: ns("shop", optedIn, nil), uid: 7000,
			args: []string{"--proxy-uid", "7000"}},
		{name: "pod-uid-root-refused", pod: transparent(map[string]string{SidecarUIDAnnotation: "0"}), ns: ns("shop", optedIn, nil),
			denied: "annotation egret.io/sidecar-uid: UID \"0\": want 1-2147483647 (not root)"},
		{name: "istio-refused-by-default", pod: transparent(nil), ns: istioNS,
			denied: "transparent mode refused: the pod has an Istio sidecar (namespace label istio-injection=enabled), and two transparent proxies in one pod capture each other's traffic. Use egret.io/mode: sidecar"},
		{name: "istio-excluded-by-namespace", pod: transparent(nil),
			ns:  ns("shop", map[string]string{discovery.InjectLabel: discovery.InjectEnabled, "istio-injection": "enabled"}, map[string]string{MeshAnnotation: "exclude"}),
			uid: 15337, mesh: "istio/exclude", port: "127.0.0.1:15401",
			args: []string{"--proxy-uid", "15337", "--redirect-port", "15401", "--exclude-uids", "1337", "--exclude-ports", "15000-15090"}},
		{name: "linkerd-excluded-by-flag", pod: transparent(nil), ns: linkerdNS, policy: func(c *Config) { c.Mesh = "exclude" },
			uid: 15337, mesh: "linkerd/exclude", args: []string{"--exclude-uids", "2102", "--exclude-ports", "4140,4143,4190,4191"}},
		{name: "pod-refuses-over-flag", pod: transparent(map[string]string{MeshAnnotation: "refuse"}), ns: linkerdNS, policy: func(c *Config) { c.Mesh = "exclude" },
			denied: "the pod has a Linkerd sidecar"},
		{name: "bad-mesh-annotation", pod: transparent(map[string]string{MeshAnnotation: "maybe"}), ns: istioNS,
			denied: `annotation egret.io/mesh: mesh "maybe": want refuse or exclude`},
		{name: "exclude-with-istios-uid-refused", pod: transparent(map[string]string{MeshAnnotation: "exclude", SidecarUIDAnnotation: "1337"}), ns: istioNS,
			denied: "the sidecar's UID 1337 is istio's proxy UID"},
		{name: "ambient-always-refused", pod: transparent(map[string]string{MeshAnnotation: "exclude"}),
			ns: ns("shop", map[string]string{discovery.InjectLabel: discovery.InjectEnabled, "istio.io/dataplane-mode": "ambient"}, nil), denied: "Istio's ambient mesh"},
		{name: "sidecar-mode-beside-istio", pod: pod(map[string]string{ModeAnnotation: "sidecar"}), ns: istioNS, uid: 15337, mesh: "istio/beside"},
		{name: "sidecar-mode-with-istios-uid-refused", pod: pod(map[string]string{ModeAnnotation: "sidecar", SidecarUIDAnnotation: "1337"}), ns: istioNS,
			denied: "would let egret's traffic bypass it"},
		{name: "app-running-as-the-sidecar-uid-warned",
			pod: func() *corev1.Pod {
				p := transparent(nil)
				p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](15337)}
				p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000)}
				return p
			}(),
			ns: ns("shop", optedIn, nil), uid: 15337, warning: "container migrate, app runs as UID 15337, egret's sidecar's: egret's rules let its traffic through unproxied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy(t, func(c *Config) {
				if tc.policy != nil {
					tc.policy(c)
				}
			})
			res := Mutate(tc.pod, Input{Policy: p, Namespace: tc.ns, Cluster: testCluster()})
			if tc.denied != "" || res.Denied != "" {
				if tc.denied == "" || !strings.Contains(res.Denied, tc.denied) {
					t.Fatalf("denied %q, want %q", res.Denied, tc.denied)
				}
				return
			}
			var sidecar, ipt *corev1.Container
			for i, c := range res.Pod.Spec.InitContainers {
				switch c.Name {
				case SidecarName:
					sidecar = &res.Pod.Spec.InitContainers[i]
				case IptablesName:
					ipt = &res.Pod.Spec.InitContainers[i]
				}
			}
			if sidecar == nil || *sidecar.SecurityContext.RunAsUser != tc.uid || *sidecar.SecurityContext.RunAsGroup != tc.uid {
				t.Fatalf("sidecar %+v", sidecar)
			}
			if len(tc.args) > 0 && (ipt == nil || !containsRun(ipt.Args, tc.args)) {
				t.Errorf("iptables args %q lack %q", ipt.Args, tc.args)
			}
			if tc.port != "" && !containsRun(sidecar.Args, []string{"--transparent-listen", tc.port}) {
				t.Errorf("sidecar args %q", sidecar.Args)
			}
			st, err := stamp.Parse(res.Pod.Annotations[stamp.Annotation])
			if err != nil || st.ProxyUID == nil || *st.ProxyUID != tc.uid || st.Mesh != tc.mesh {
				t.Errorf("stamp %+v, %v", st, err)
			}
			if all := strings.Join(res.Warnings, "\n"); (tc.warning == "") != (all == "") || !strings.Contains(all, tc.warning) {
				t.Errorf("warnings %q, want %q", all, tc.warning)
			}
			if again := Mutate(res.Pod, Input{Policy: p, Namespace: tc.ns, Cluster: testCluster()}); !equality.Semantic.DeepEqual(again.Pod, res.Pod) {
				t.Error("a second mutation changed the pod")
			}
		})
	}
}

// TestMutateMeshSeenOnReinvocation: Istio's webhook ran after egret's and
// added its containers; egret, invoked again, rebuilds its own containers
// with the exclusions (and only its own).
func TestMutateMeshSeenOnReinvocation(t *testing.T) {
	p := testPolicy(t, func(c *Config) { c.Mesh = "exclude" })
	in := Input{Policy: p, Namespace: ns("shop", optedIn, nil), Cluster: testCluster()}
	first := Mutate(pod(map[string]string{ModeAnnotation: "transparent"}), in)
	if first.Denied != "" {
		t.Fatal(first.Denied)
	}
	meshed := first.Pod.DeepCopy()
	meshed.Spec.InitContainers = append([]corev1.Container{{Name: "istio-init", Image: "istio/proxyv2"}}, meshed.Spec.InitContainers...)
	meshed.Spec.Containers = append(meshed.Spec.Containers, corev1.Container{Name: "istio-proxy", Image: "istio/proxyv2"})
	again := Mutate(meshed, in)
	if again.Denied != "" {
		t.Fatal(again.Denied)
	}
	names := []string{}
	var ipt corev1.Container
	for _, c := range again.Pod.Spec.InitContainers {
		names = append(names, c.Name)
		if c.Name == IptablesName {
			ipt = c
		}
	}
	if !slices.Equal(names, []string{IptablesName, SidecarName, "istio-init", "migrate"}) || !containsRun(ipt.Args, []string{"--exclude-uids", "1337"}) {
		b, _ := yaml.Marshal(again.Pod.Spec.InitContainers)
		t.Fatalf("init containers %v:\n%s", names, b)
	}
	golden(t, "transparent-beside-istio.golden.yaml", mustYAML(t, again.Pod))
	if third := Mutate(again.Pod, in); !equality.Semantic.DeepEqual(third.Pod, again.Pod) {
		t.Error("a third mutation changed the pod")
	}
}

// containsRun reports whether want appears in args as consecutive elements.
func containsRun(args, want []string) bool {
	for i := 0; i+len(want) <= len(args); i++ {
		if slices.Equal(args[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

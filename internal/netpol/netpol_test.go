package netpol

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/discovery"
)

func mustPolicy(t *testing.T, y string) networkingv1.NetworkPolicy {
	t.Helper()
	var np networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict([]byte(y), &np); err != nil {
		t.Fatal(err)
	}
	return np
}

func ip(s string) Dest {
	return Dest{IP: netip.MustParseAddr(s), Protocol: corev1.ProtocolTCP, Port: 443}
}

// TestEvaluateSemantics pins the evaluator to networking.k8s.io/v1's
// rules, each case written out by hand from the API's documentation.
func TestEvaluateSemantics(t *testing.T) {
	src := Source{Namespace: "app", Labels: map[string]string{"app": "web"}}
	pod := func(ns string, l map[string]string, port int32) Dest {
		return Dest{Pod: true, Namespace: ns, NamespaceLabels: map[string]string{NamespaceNameLabel: ns}, Labels: l, Protocol: corev1.ProtocolTCP, Port: port}
	}
	cases := []struct {
		name string
		pols []string
		d    Dest
		want bool
	}{
		{"no policy: not isolated", nil, ip("1.1.1.1"), true},
		{"an ingress-only policy does not isolate egress", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Ingress]}}`}, ip("1.1.1.1"), true},
		{"egress type with no rules denies all", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress]}}`}, ip("10.0.0.1"), false},
		{"a policy of another namespace does not select the pod", []string{`{metadata: {namespace: other}, spec: {podSelector: {}, policyTypes: [Egress]}}`}, ip("1.1.1.1"), true},
		{"a podSelector that does not match does not isolate", []string{`{metadata: {namespace: app}, spec: {podSelector: {matchLabels: {app: db}}, policyTypes: [Egress]}}`}, ip("1.1.1.1"), true},
		{"policyTypes unset with egress rules isolates egress", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8}}]}]}}`}, ip("1.1.1.1"), false},
		{"an empty rule allows everything", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{}]}}`}, ip("1.1.1.1"), true},
		{"ipBlock contains", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8}}]}]}}`}, ip("10.3.4.5"), true},
		{"ipBlock except", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.3.0.0/16]}}]}]}}`}, ip("10.3.4.5"), false},
		{"port mismatch", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8}}], ports: [{port: 80}]}]}}`}, ip("10.3.4.5"), false},
		{"port without protocol is TCP", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{ports: [{port: 443}]}]}}`}, ip("1.1.1.1"), true},
		{"UDP rule does not allow TCP", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{ports: [{port: 443, protocol: UDP}]}]}}`}, ip("1.1.1.1"), false},
		{"endPort range", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{ports: [{port: 400, endPort: 500}]}]}}`}, ip("1.1.1.1"), true},
		{"policies add up", []string{
			`{metadata: {namespace: app, name: a}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8}}]}]}}`,
			`{metadata: {namespace: app, name: b}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 1.1.1.0/24}}]}]}}`}, ip("1.1.1.1"), true},
		{"podSelector alone: same namespace only", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{podSelector: {}}]}]}}`}, pod("other", nil, 80), false},
		{"podSelector alone: own namespace", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{podSelector: {}}]}]}}`}, pod("app", nil, 80), true},
		{"namespaceSelector {} selects every pod", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {}}]}]}}`}, pod("other", nil, 80), true},
		{"a selector never matches a non-pod address", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {}}]}]}}`}, ip("1.1.1.1"), false},
		{"namespace and pod selector in one peer: both", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, podSelector: {matchLabels: {k8s-app: kube-dns}}}]}]}}`}, pod("kube-system", map[string]string{"k8s-app": "other"}, 53), false},
		{"named port", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{ports: [{port: proxy}]}]}}`}, Dest{Pod: true, Namespace: "x", Protocol: corev1.ProtocolTCP, Port: 3128, PortName: "proxy"}, true},
		{"named port does not match a number", []string{`{metadata: {namespace: app}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{ports: [{port: proxy}]}]}}`}, ip("1.1.1.1"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var pols []networkingv1.NetworkPolicy
			for _, y := range c.pols {
				pols = append(pols, mustPolicy(t, y))
			}
			if got := Evaluate(pols, src, c.d); got != c.want {
				t.Errorf("Evaluate = %v, want %v", got, c.want)
			}
		})
	}
}

// cluster is a discovery result as the API server of kubetest gives it,
// with two nodes.
func cluster() *discovery.Result {
	return discovery.Compute(discovery.Inputs{
		ServiceCIDRs:         map[string][]netip.Prefix{"kubernetes": {netip.MustParsePrefix("10.96.0.0/16")}},
		NodePodCIDRs:         map[string][]netip.Prefix{"n1": {netip.MustParsePrefix("10.244.0.0/24")}, "n2": {netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}},
		KubernetesServiceIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")},
		APIServerAddrs:       map[string][]netip.Addr{"kubernetes": {netip.MustParseAddr("192.168.50.10")}},
		NodeAddrs:            map[string][]netip.Addr{"n1": {netip.MustParseAddr("192.168.50.10")}, "n2": {netip.MustParseAddr("192.168.50.11")}},
		Additions:            []discovery.Addition{{Value: "10.20.0.0/16", Source: "configmap/egret-system/egret-noproxy"}},
	}, discovery.Options{})
}

func inputs() Inputs {
	return Inputs{DNS: DefaultDNS, Ranges: Ranges(cluster()),
		Gateway: Peer{Namespace: "egret-system", Labels: DefaultGatewayLabels, Ports: []Port{{Protocol: corev1.ProtocolTCP, Port: intstr.FromString("proxy")}}}}
}

func TestRanges(t *testing.T) {
	var got []string
	for _, r := range Ranges(cluster()) {
		got = append(got, r.Prefix.String()+"="+string(r.Kind))
	}
	// 10.96.0.1 folds into the Service range; the two pod /24s are
	// aggregated by discovery; metadata and additions are not the cluster.
	want := "10.96.0.0/16=service-cidr 10.244.0.0/23=pod-cidr 192.168.50.10/32=apiserver 192.168.50.11/32=node-ip fd00:10:244:1::/64=pod-cidr"
	if strings.Join(got, " ") != want {
		t.Errorf("Ranges:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

// TestRenderedPolicyAllows checks what the rendered object allows, one
// destination at a time, with the expectations written out here (not
// computed by Probes).
func TestRenderedPolicyAllows(t *testing.T) {
	np := Render("payments", inputs())
	pols := []networkingv1.NetworkPolicy{*np}
	src := Source{Namespace: "payments", Labels: map[string]string{"app": "checkout"}}
	dnsPod := Dest{Pod: true, Namespace: "kube-system", NamespaceLabels: map[string]string{NamespaceNameLabel: "kube-system"}, Labels: map[string]string{"k8s-app": "kube-dns"}, IP: netip.MustParseAddr("10.244.0.5")}
	gwPod := Dest{Pod: true, Namespace: "egret-system", NamespaceLabels: map[string]string{NamespaceNameLabel: "egret-system"}, Labels: map[string]string{"app.kubernetes.io/name": "egret-gateway"}, IP: netip.MustParseAddr("10.244.1.7")}
	with := func(d Dest, proto corev1.Protocol, port int32, name string) Dest {
		d.Protocol, d.Port, d.PortName = proto, port, name
		return d
	}
	hostGW := with(gwPod, corev1.ProtocolTCP, 3128, "proxy")
	hostGW.IP = netip.MustParseAddr("192.168.50.11") // a hostNetwork gateway pod
	table := []struct {
		name string
		d    Dest
		want bool
	}{
		{"DNS pod UDP 53", with(dnsPod, corev1.ProtocolUDP, 53, "dns"), true},
		{"DNS pod TCP 53", with(dnsPod, corev1.ProtocolTCP, 53, "dns-tcp"), true},
		{"gateway pod proxy port", with(gwPod, corev1.ProtocolTCP, 3128, "proxy"), true},
		{"hostNetwork gateway pod proxy port", hostGW, true},
		{"another pod, any port", Dest{Pod: true, Namespace: "shop", NamespaceLabels: map[string]string{NamespaceNameLabel: "shop"}, IP: netip.MustParseAddr("10.244.1.9"), Protocol: corev1.ProtocolTCP, Port: 5432}, true},
		{"Service range", Dest{IP: netip.MustParseAddr("10.96.12.4"), Protocol: corev1.ProtocolTCP, Port: 80}, true},
		{"kubernetes Service", Dest{IP: netip.MustParseAddr("10.96.0.1"), Protocol: corev1.ProtocolTCP, Port: 443}, true},
		{"API server", Dest{IP: netip.MustParseAddr("192.168.50.10"), Protocol: corev1.ProtocolTCP, Port: 6443}, true},
		{"node kubelet", Dest{IP: netip.MustParseAddr("192.168.50.11"), Protocol: corev1.ProtocolTCP, Port: 10250}, true},
		{"IPv6 pod range", Dest{IP: netip.MustParseAddr("fd00:10:244:1::9"), Protocol: corev1.ProtocolTCP, Port: 80}, true},
		{"outside HTTPS", Dest{IP: netip.MustParseAddr("1.1.1.1"), Protocol: corev1.ProtocolTCP, Port: 443}, false},
		{"outside on the proxy port", Dest{IP: netip.MustParseAddr("93.184.215.14"), Protocol: corev1.ProtocolTCP, Port: 3128}, false},
		{"public DNS", Dest{IP: netip.MustParseAddr("8.8.8.8"), Protocol: corev1.ProtocolUDP, Port: 53}, false},
		{"metadata", Dest{IP: netip.MustParseAddr("169.254.169.254"), Protocol: corev1.ProtocolTCP, Port: 80}, false},
		{"a NO_PROXY addition (intranet)", Dest{IP: netip.MustParseAddr("10.20.1.1"), Protocol: corev1.ProtocolTCP, Port: 443}, false},
		{"another node of the subnet, not a node", Dest{IP: netip.MustParseAddr("192.168.50.99"), Protocol: corev1.ProtocolTCP, Port: 22}, false},
		{"pod range neighbour", Dest{IP: netip.MustParseAddr("10.244.2.1"), Protocol: corev1.ProtocolTCP, Port: 80}, false},
		{"outside IPv6", Dest{IP: netip.MustParseAddr("2606:4700:4700::1111"), Protocol: corev1.ProtocolTCP, Port: 443}, false},
	}
	for _, c := range table {
		if got := Evaluate(pols, src, c.d); got != c.want {
			t.Errorf("%s: allowed=%v, want %v", c.name, got, c.want)
		}
	}
	if wrong := Judge(pols, src, inputs()); len(wrong) != 0 {
		t.Errorf("Judge finds the rendered policy wrong: %+v", wrong)
	}
	if np.Annotations[SourcesAnnotation] == "" || np.Labels[discovery.ManagedByLabel] != "egret" {
		t.Errorf("metadata %+v", np.ObjectMeta)
	}
}

// TestJudgeFindsMistakes: the classic hand-written policies each fail on
// the destination they get wrong.
func TestJudgeFindsMistakes(t *testing.T) {
	src := Source{Namespace: "payments"}
	cases := []struct {
		name, policy, wrong string
	}{
		{"only the gateway", `{metadata: {namespace: payments}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: egret-system}}}]}]}}`, "DNS pods UDP/53"},
		{"kubeadm defaults on another cluster", `{metadata: {namespace: payments}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {}}, {ipBlock: {cidr: 10.96.0.0/12}}]}]}}`, "apiserver 192.168.50.10"},
		{"0.0.0.0/0 on 443", `{metadata: {namespace: payments}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {}}, {ipBlock: {cidr: 0.0.0.0/0}}]}]}}`, "outside HTTPS 1.1.1.1"},
		{"DNS to anywhere", `{metadata: {namespace: payments}, spec: {podSelector: {}, policyTypes: [Egress], egress: [{ports: [{port: 53, protocol: UDP}]}, {to: [{namespaceSelector: {}}, {ipBlock: {cidr: 10.0.0.0/8}}, {ipBlock: {cidr: 192.168.50.0/24}}, {ipBlock: {cidr: fd00::/8}}]}]}}`, "outside DNS 8.8.8.8"},
	}
	for _, c := range cases {
		wrong := Judge([]networkingv1.NetworkPolicy{mustPolicy(t, c.policy)}, src, inputs())
		var names []string
		for _, w := range wrong {
			names = append(names, w.Name)
		}
		if !strings.Contains(strings.Join(names, "; "), c.wrong) {
			t.Errorf("%s: wrong %q, want one naming %q", c.name, names, c.wrong)
		}
	}
}

func TestRenderIsStable(t *testing.T) {
	a, _ := yaml.Marshal(Render("x", inputs()))
	b, _ := yaml.Marshal(Render("x", inputs()))
	if string(a) != string(b) {
		t.Error("Render is not deterministic")
	}
	_ = metav1.LabelSelector{}
}

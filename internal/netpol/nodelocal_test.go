package netpol

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// nodeLocalDaemonSet is NodeLocal DNSCache as its upstream manifest runs
// it: host network, -localip with the link-local address and the kube-dns
// ClusterIP.
func nodeLocalDaemonSet(args ...string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "node-local-dns"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{HostNetwork: true,
			Containers: []corev1.Container{{Name: "node-cache", Args: args}}}}}}
}

func fakeReader(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := appsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

// TestNodeLocalDNS: with NodeLocal DNSCache the pods' resolver is a
// link-local address on the node (a host-network pod no pod selector
// reaches); the generated policy allows it on UDP/TCP 53 and nothing else
// there, found from the DaemonSet or named by the flag.
func TestNodeLocalDNS(t *testing.T) {
	ctx := context.Background()
	kubeDNS := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"k8s-app": "kube-dns"}, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP}}}}
	for _, tc := range []struct {
		name string
		objs []client.Object
		opt  string
		want string
	}{
		{"daemonset-localip", []client.Object{kubeDNS, nodeLocalDaemonSet("-localip", "169.254.20.10,10.96.0.10", "-conf", "/etc/Corefile")}, "", "169.254.20.10 10.96.0.10"},
		{"daemonset-localip-equals", []client.Object{kubeDNS, nodeLocalDaemonSet("-localip=169.254.25.10")}, "auto", "169.254.25.10"},
		{"daemonset-without-localip", []client.Object{kubeDNS, nodeLocalDaemonSet("-conf", "/etc/Corefile")}, "", "169.254.20.10"},
		{"no-daemonset", []client.Object{kubeDNS}, "", ""},
		{"off", []client.Object{kubeDNS, nodeLocalDaemonSet("-localip", "169.254.20.10")}, "off", ""},
		{"named", []client.Object{kubeDNS}, "169.254.20.10", "169.254.20.10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{NodeLocalDNS: tc.opt}
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			dns, gw, _, err := ReadPeers(ctx, fakeReader(t, tc.objs...), "egret-system", o)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range dns.IPs {
				got = append(got, a.String())
			}
			if strings.Join(got, " ") != tc.want {
				t.Fatalf("NodeLocal DNS addresses %v, want %q", got, tc.want)
			}
			in := Inputs{DNS: dns, Gateway: gw, Ranges: Ranges(cluster())}
			pols := []networkingv1.NetworkPolicy{*Render("payments", in)}
			src := Source{Namespace: "payments", Labels: map[string]string{"app": "checkout"}}
			link := netip.MustParseAddr("169.254.20.10")
			for _, c := range []struct {
				d    Dest
				want bool
			}{
				{Dest{IP: link, Protocol: corev1.ProtocolUDP, Port: 53}, tc.want != "" && strings.Contains(tc.want, "169.254.20.10")},
				{Dest{IP: link, Protocol: corev1.ProtocolTCP, Port: 53}, tc.want != "" && strings.Contains(tc.want, "169.254.20.10")},
				{Dest{IP: link, Protocol: corev1.ProtocolTCP, Port: 8080}, false},
				{Dest{IP: netip.MustParseAddr("169.254.169.254"), Protocol: corev1.ProtocolTCP, Port: 80}, false},
				{Dest{IP: netip.MustParseAddr("8.8.8.8"), Protocol: corev1.ProtocolUDP, Port: 53}, false},
			} {
				if got := Evaluate(pols, src, c.d); got != c.want {
					t.Errorf("%s %s/%d: allowed=%v, want %v", c.d.IP, c.d.Protocol, c.d.Port, got, c.want)
				}
			}
			if wrong := Judge(pols, src, in); len(wrong) != 0 {
				t.Errorf("Judge finds the rendered policy wrong: %+v", wrong)
			}
			// A policy written without the cache's address is judged wrong.
			if len(dns.IPs) > 0 {
				old := in
				old.DNS.IPs = nil
				wrong := Judge([]networkingv1.NetworkPolicy{*Render("payments", old)}, src, in)
				if !slices.ContainsFunc(wrong, func(p Probe) bool { return strings.HasPrefix(p.Name, "NodeLocal DNSCache") }) {
					t.Errorf("Judge does not miss NodeLocal DNSCache in a policy without it: %+v", wrong)
				}
			}
		})
	}
	if err := (Options{NodeLocalDNS: "169.254.20.10,nope"}).Validate(); err == nil || !strings.Contains(err.Error(), "169.254.20.10") {
		t.Errorf("a bad --node-local-dns: %v", err)
	}
}

package identity

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func pod(ns, name, uid, ip string, labels map[string]string, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Labels: labels},
		Spec:       corev1.PodSpec{ServiceAccountName: "sa-" + name},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if ip != "" {
		p.Status.PodIP = ip
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func owner(ps *Pods, ip string) string {
	p := ps.ByAddr(netip.MustParseAddr(ip))
	if p == nil {
		return ""
	}
	return p.Namespace + "/" + p.Name
}

// TestAddressOwnership covers who owns an address as pods come, change
// and go: a reused address never names the old pod, two live claimants
// make it nobody's, and pods that share their node's address or finished
// own none.
func TestAddressOwnership(t *testing.T) {
	ps := NewPods()
	app := map[string]string{"app": "a"}
	ps.Add(pod("ns1", "a", "u1", "10.0.0.1", app))
	ps.Add(pod("ns1", "b", "u2", "10.0.0.2", app))
	if got := owner(ps, "10.0.0.1"); got != "ns1/a" {
		t.Fatalf("10.0.0.1 owner = %q", got)
	}
	if ps.ByName("ns1", "a").Labels != ps.ByName("ns1", "b").Labels {
		t.Error("pods with the same namespace and labels do not share a LabelSet")
	}
	if ps.LabelSets() != 1 {
		t.Errorf("label sets = %d, want 1", ps.LabelSets())
	}
	// IPv4-mapped and zoned forms are the same address.
	if p := ps.ByAddr(netip.MustParseAddr("::ffff:10.0.0.1")); p == nil || p.Name != "a" {
		t.Errorf("mapped address: %v", p)
	}

	t.Run("reused-address-while-the-old-pod-lingers-is-nobodys", func(t *testing.T) {
		ps.Add(pod("ns2", "c", "u3", "10.0.0.2", nil))
		if got := owner(ps, "10.0.0.2"); got != "" {
			t.Errorf("conflicted address owned by %q", got)
		}
		ps.Delete(pod("ns1", "b", "u2", "", nil))
		if got := owner(ps, "10.0.0.2"); got != "ns2/c" {
			t.Errorf("after the old pod left, owner = %q, want ns2/c", got)
		}
	})
	t.Run("finished-pod-releases-its-address", func(t *testing.T) {
		ps.Update(pod("ns1", "a", "u1", "10.0.0.1", app, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }))
		if got := owner(ps, "10.0.0.1"); got != "" {
			t.Errorf("a finished pod owns %q", got)
		}
		if ps.ByName("ns1", "a") == nil {
			t.Error("the finished pod left the name index")
		}
	})
	t.Run("host-network-pods-own-nothing", func(t *testing.T) {
		ps.Add(pod("kube-system", "proxy", "u4", "192.168.1.10", nil, func(p *corev1.Pod) { p.Spec.HostNetwork = true }))
		if got := owner(ps, "192.168.1.10"); got != "" {
			t.Errorf("a hostNetwork pod owns its node's address: %q", got)
		}
	})
	t.Run("relabel-moves-to-another-label-set", func(t *testing.T) {
		ps.Add(pod("ns2", "c", "u3", "10.0.0.2", map[string]string{"tier": "x"}))
		if got := ps.ByName("ns2", "c").Labels.Labels["tier"]; got != "x" {
			t.Errorf("labels after update: %v", ps.ByName("ns2", "c").Labels.Labels)
		}
		if got := owner(ps, "10.0.0.2"); got != "ns2/c" {
			t.Errorf("owner after relabel = %q", got)
		}
	})
	t.Run("relist-replaces-everything", func(t *testing.T) {
		ps.Replace([]any{pod("ns3", "d", "u5", "10.0.0.1", nil)}, "1")
		if got := owner(ps, "10.0.0.1"); got != "ns3/d" {
			t.Errorf("after relist 10.0.0.1 = %q", got)
		}
		if owner(ps, "10.0.0.2") != "" || ps.Len() != 1 || ps.LabelSets() != 1 || !ps.Synced() {
			t.Errorf("after relist: len %d, sets %d, synced %v", ps.Len(), ps.LabelSets(), ps.Synced())
		}
	})
	t.Run("deleting-the-last-user-frees-its-label-set", func(t *testing.T) {
		ps.Delete(pod("ns3", "d", "u5", "", nil))
		if ps.Len() != 0 || ps.LabelSets() != 0 || len(ps.byIP) != 0 || len(ps.conflicts) != 0 {
			t.Errorf("left behind: %d pods, %d sets, %d addresses, %d conflicts", ps.Len(), ps.LabelSets(), len(ps.byIP), len(ps.conflicts))
		}
	})
}

// TestThreeClaimants: an address three pods claim stays nobody's until
// only one is left.
func TestThreeClaimants(t *testing.T) {
	ps := NewPods()
	for i := range 3 {
		ps.Add(pod("ns", fmt.Sprint("p", i), fmt.Sprint("u", i), "10.1.1.1", nil))
	}
	ps.Delete(pod("ns", "p0", "u0", "", nil))
	if got := owner(ps, "10.1.1.1"); got != "" {
		t.Fatalf("two claimants left, owner %q", got)
	}
	ps.Delete(pod("ns", "p2", "u2", "", nil))
	if got := owner(ps, "10.1.1.1"); got != "ns/p1" {
		t.Fatalf("owner = %q, want ns/p1", got)
	}
}

// syntheticPod is a pod as the API server sends it: a Deployment's pod
// with the usual labels and a full spec, most of which the index drops.
func syntheticPod(i int) *corev1.Pod {
	rs := i / 10 // ten pods per ReplicaSet
	ns := fmt.Sprintf("team-%03d", i/500)
	p := pod(ns, fmt.Sprintf("app-%04d-7d9f8c6b5-%05d", rs, i), fmt.Sprintf("0b8e4f3a-2c1d-4e5f-9a7b-%012d", i),
		fmt.Sprintf("10.%d.%d.%d", 16+i>>16, (i>>8)&255, i&255),
		map[string]string{"app": fmt.Sprintf("app-%04d", rs), "pod-template-hash": fmt.Sprintf("7d9f8c%04d", rs),
			"app.kubernetes.io/part-of": ns, "version": "v1"})
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.example/app:1.2.3",
		Env: []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "http://egret-gateway.egret-system.svc:3128"}}}}
	p.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
	return p
}

func BenchmarkByAddr(b *testing.B) {
	ps := NewPods()
	for i := range 50000 {
		ps.Add(syntheticPod(i))
	}
	addr := netip.MustParseAddr("10.16.100.100")
	b.ReportAllocs()
	for b.Loop() {
		if ps.ByAddr(addr) == nil {
			b.Fatal("no owner")
		}
	}
}

// TestHasNamespace: a namespace is known while one of its pods is indexed,
// through updates (an update is not a second pod), deletes and relists.
func TestHasNamespace(t *testing.T) {
	ps := NewPods()
	ps.Add(pod("shop", "a", "u1", "10.0.0.1", nil))
	ps.Add(pod("shop", "b", "u2", "10.0.0.2", nil))
	ps.Update(pod("shop", "a", "u1", "10.0.0.1", map[string]string{"v": "2"}))
	ps.Add(pod("billing", "c", "u3", "", nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }))
	if !ps.HasNamespace("shop") || !ps.HasNamespace("billing") || ps.HasNamespace("other") {
		t.Fatalf("shop %v billing %v other %v", ps.HasNamespace("shop"), ps.HasNamespace("billing"), ps.HasNamespace("other"))
	}
	ps.Delete(pod("shop", "a", "u1", "", nil))
	if !ps.HasNamespace("shop") {
		t.Error("shop forgotten while pod b is indexed")
	}
	ps.Delete(pod("shop", "b", "u2", "", nil))
	if ps.HasNamespace("shop") {
		t.Error("shop still known with no pod")
	}
	ps.Replace([]any{pod("payments", "d", "u4", "10.0.0.4", nil)}, "")
	if ps.HasNamespace("billing") || !ps.HasNamespace("payments") {
		t.Errorf("after a relist: billing %v payments %v", ps.HasNamespace("billing"), ps.HasNamespace("payments"))
	}
}

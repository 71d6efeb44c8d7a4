//go:build !race

package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"egret.io/egret/internal/identity"
)

// bigPolicy is an EgressPolicy of size about bytes: rules of 1,024 hosts
// of 24 bytes each, as the API server would hand it to the informer (JSON).
func bigPolicy(ns, name string, bytes int) []byte {
	var rules []map[string]any
	n := 0
	for n < bytes {
		var hs []string
		for len(hs) < MaxEntries && n < bytes {
			h := fmt.Sprintf("h%07d.%s.example.test", n, ns)
			hs = append(hs, h)
			n += len(h) - 24
			n += 24
		}
		rules = append(rules, map[string]any{"action": "allow", "hosts": hs})
		n += 64
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "egret.io/v1alpha1", "kind": "EgressPolicy",
		"metadata": map[string]any{"namespace": ns, "name": name, "generation": 1, "uid": ns + "/" + name},
		"spec":     map[string]any{"egress": rules}}) // selects every pod of ns
	return b
}

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// load decodes docs as the informer does (JSON into unstructured, which
// its cache keeps) and sets them in e as the watcher does.
func load(e *Engine, docs [][]byte) []*unstructured.Unstructured {
	return loadFrom(e, len(docs), func(i int) []byte { return docs[i] })
}

// loadFrom is load with the i-th of n documents from doc (made as they
// arrive, as a list response is decoded).
func loadFrom(e *Engine, n int, doc func(int) []byte) []*unstructured.Unstructured {
	cache := make([]*unstructured.Unstructured, 0, n)
	var h heldBytes
	for i := range n {
		d := doc(i)
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(d); err != nil {
			panic(err)
		}
		h.transform(u) // the informer's transform
		cache = append(cache, u)
		e.Set(FromUnstructured(u), false)
	}
	return cache
}

// BenchmarkPolicyMemory reports the heap held per byte of policy (Size):
// the informer's copy of the object and the compiled tables, for policies
// of 256 KiB (the per-policy maximum).
func BenchmarkPolicyMemory(b *testing.B) {
	for b.Loop() {
		const n = 8
		docs := make([][]byte, n)
		for i := range docs {
			docs[i] = bigPolicy(fmt.Sprintf("ns%d", i), "p", MaxPolicyBytes-1024)
		}
		before := heapAlloc()
		e := &Engine{Pods: identity.NewPods()}
		cache := load(e, docs)
		after := heapAlloc()
		size := 0
		for _, c := range e.Policies() {
			if c.Err != nil {
				b.Fatal(c.Err)
			}
			size += c.Size()
		}
		b.ReportMetric(float64(after-before)/float64(size), "heap-B/policy-B")
		runtime.KeepAlive(cache)
		runtime.KeepAlive(docs)
	}
}

// TestMemoryAtMaximum fills the gateway to its documented maximum
// (MaxTotalBytes of policies, MaxPolicyBytes each) and more, as a tenant
// would try, with a pod selecting every one (tables for each combination
// that occurs), and checks that the heap it holds, and its peak while the
// policies arrive (a relist at start), stay within the budget that leaves
// the gateway's 512 MiB limit room for its connections.
func TestMemoryAtMaximum(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates the maximum")
	}
	const budget = 256 << 20
	per := MaxPolicyBytes - 1024
	n := 4 * MaxTotalBytes / per // four times what fits: the rest are refused, half of them held back
	docBytes := 0
	before := heapAlloc()
	e := &Engine{Pods: identity.NewPods()}
	cache := loadFrom(e, n, func(i int) []byte {
		d := bigPolicy(fmt.Sprintf("ns%d", i/MaxPoliciesPerNamespace), fmt.Sprintf("p%d", i), per)
		docBytes += len(d)
		return d
	})
	// A pod in each namespace, selected by all its policies: the
	// combination's tables are built.
	for i := 0; i*MaxPoliciesPerNamespace < n; i++ {
		ip := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		e.Pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i), Name: "web", UID: types.UID(fmt.Sprint(i))},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String()}})
		if w, err := e.Identify(context.Background(), ip, ""); err != nil || w.Rules == nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	after := heapAlloc()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	accepted, refused, heldBack, size := 0, 0, 0, 0
	for _, c := range e.Policies() {
		switch c.Reason {
		case ReasonValid:
			accepted++
			size += c.Size()
		case ReasonLimitExceeded:
			refused++
			if strings.HasPrefix(c.src.Spec.Mode, heldBackMode) {
				heldBack++
			}
		default:
			t.Fatalf("%s: %v", c.Key, c.Err)
		}
	}
	held := after - before
	t.Logf("%d policies (%d bytes of JSON): %d accepted (%d bytes of policy), %d refused (%d of them held back by the cache); heap held %d MiB (%.1f bytes per policy byte), process heap %d MiB, peak heap (HeapSys) %d MiB",
		n, docBytes, accepted, size, refused, heldBack, held>>20, float64(held)/float64(size), after>>20, m.HeapSys>>20)
	if refused == 0 || heldBack == 0 || size > MaxTotalBytes {
		t.Errorf("the total limit did not hold: %d bytes accepted, %d refused", size, refused)
	}
	if held > budget {
		t.Errorf("the policies hold %d MiB, budget %d MiB", held>>20, budget>>20)
	}
	// The peak of the whole load (the relist at start), with the Go
	// collector's default headroom, stays under the 512 MiB limit with
	// room for the rest of the gateway.
	if m.HeapSys > 448<<20 {
		t.Errorf("peak heap %d MiB while the policies arrived, budget 448 MiB", m.HeapSys>>20)
	}
	runtime.KeepAlive(cache)
}

// TestTablesShared: the policies' compiled tables are shared by every
// combination of policies that applies to some pod, not built again for
// each: 200 namespaces each with its own policy under a cluster default of
// 10,000 deny hosts add little to the heap when their pods arrive.
func TestTablesShared(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates")
	}
	var deny []string
	for i := range 10 {
		hs := make([]string, 1000)
		for j := range hs {
			hs[j] = fmt.Sprintf("blocked-%d-%d.example", i, j)
		}
		deny = append(deny, `{action: deny, hosts: [`+strings.Join(hs, ", ")+`]}`)
	}
	e := &Engine{Pods: identity.NewPods()}
	e.Set(parse(t, `{metadata: {name: default}, spec: {egress: [`+strings.Join(deny, ", ")+`]}}`), true)
	const n = 200
	for i := range n {
		e.Set(parse(t, fmt.Sprintf(`{metadata: {name: p, namespace: ns%d}, spec: {egress: [{action: allow, hosts: [a.example]}]}}`, i)), false)
	}
	before := heapAlloc()
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		e.Pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i), Name: "web", UID: types.UID(fmt.Sprint(i))},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String()}})
		if w, err := e.Identify(context.Background(), ip, ""); err != nil || w.Rules == nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	per := (heapAlloc() - before) / n
	t.Logf("%d combinations under a 10,000-host cluster default: %d bytes each (pod and its index included)", n, per)
	if per > 16<<10 {
		t.Errorf("%d bytes per combination: the cluster default's tables are built again for each", per)
	}
	runtime.KeepAlive(e)
}

package webhook

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/lint"
	"egret.io/egret/internal/noproxy"
)

var (
	propertySeed = flag.Uint64("property-seed", 0, "seed of TestInjectionPassesValidation (0: time-based, logged)")
	propertyN    = flag.Int("property-n", 200, "cases of TestInjectionPassesValidation")
)

// shape is one generated cluster: what discovery would read, and how.
type shape struct {
	name string
	in   discovery.Inputs
	opts discovery.Options
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func v4Prefix(r *rand.Rand, bits int) netip.Prefix {
	a := netip.AddrFrom4([4]byte{pick(r, byte(10), 172, 192, 100), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
	return netip.PrefixFrom(a, bits).Masked()
}

func v6Prefix(r *rand.Rand, bits int) netip.Prefix {
	var b [16]byte
	b[0], b[1] = 0xfd, byte(r.IntN(256))
	for i := 2; i < 8; i++ {
		b[i] = byte(r.IntN(256))
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), bits).Masked()
}

func hostIn(r *rand.Rand, p netip.Prefix) netip.Addr {
	a := p.Addr().AsSlice()
	a[len(a)-1] |= byte(1 + r.IntN(200))
	ip, _ := netip.AddrFromSlice(a)
	return ip
}

// genShape makes a single-stack IPv4, dual-stack or IPv6-only cluster with
// random ranges, node counts, API server addresses, domain, metadata
// addresses and additions.
func genShape(r *rand.Rand) shape {
	family := pick(r, "ipv4", "dual", "ipv6")
	var s shape
	s.name = family
	v4, v6 := family != "ipv6", family != "ipv4"
	var svc []netip.Prefix
	if v4 {
		svc = append(svc, v4Prefix(r, pick(r, 12, 16, 20)))
	}
	if v6 {
		svc = append(svc, v6Prefix(r, pick(r, 108, 112, 116)))
	}
	switch pick(r, "objects", "flag", "none") {
	case "objects":
		s.in.ServiceCIDRs = map[string][]netip.Prefix{"kubernetes": svc}
	case "flag":
		s.opts.ServiceCIDRs = svc
	}
	s.in.KubernetesServiceIPs = []netip.Addr{hostIn(r, svc[0])}
	nodes := r.IntN(5)
	pod4, pod6 := v4Prefix(r, 16), v6Prefix(r, 56)
	s.in.NodePodCIDRs = map[string][]netip.Prefix{}
	for i := range nodes {
		var ps []netip.Prefix
		if v4 {
			a := pod4.Addr().As4()
			a[2] = byte(i)
			ps = append(ps, netip.PrefixFrom(netip.AddrFrom4(a), 24))
		}
		if v6 {
			a := pod6.Addr().As16()
			a[7] = byte(i)
			ps = append(ps, netip.PrefixFrom(netip.AddrFrom16(a), 64))
		}
		s.in.NodePodCIDRs[fmt.Sprintf("node-%d", i)] = ps
	}
	if nodes == 0 && r.IntN(2) == 0 {
		if v4 {
			s.opts.PodCIDRs = append(s.opts.PodCIDRs, pod4)
		}
		if v6 {
			s.opts.PodCIDRs = append(s.opts.PodCIDRs, pod6)
		}
	}
	var api []netip.Addr
	for range r.IntN(3) {
		if v4 && (!v6 || r.IntN(2) == 0) {
			api = append(api, netip.AddrFrom4([4]byte{172, 18, 0, byte(2 + r.IntN(50))}))
		} else {
			api = append(api, hostIn(r, v6Prefix(r, 64)))
		}
	}
	if len(api) > 0 {
		s.in.APIServerAddrs = map[string][]netip.Addr{"kubernetes": api}
	}
	s.opts.ClusterDomain = pick(r, "", "cluster.local", "corp.example", "k8s.internal.", "c1.eu-west.example")
	switch r.IntN(4) {
	case 0:
		s.opts.MetadataAddresses = []string{}
	case 1:
		s.opts.MetadataAddresses = []string{"169.254.169.254"}
	case 2:
		s.opts.MetadataAddresses = []string{"fd00:ec2::254", "169.254.170.2"}
	}
	for range r.IntN(3) {
		s.in.Additions = append(s.in.Additions, discovery.Addition{Value: pick(r, "registry.corp", ".internal.example", "10.50.0.0/16", "db.corp:5432", "fd00:50::/64"), Source: "configmap/egret-system/egret-noproxy"})
	}
	return s
}

// genPod makes a pod with up to three containers and an init container,
// each with user-set proxy variables in either case (or both, or none).
// User values are ones a careful user might set: a corporate proxy, or a
// NO_PROXY that covers the cluster; the property is that egret never makes
// a clean pod dirty, not that it fixes a user's mistakes.
func genPod(r *rand.Rand, cluster *discovery.Result, nsAdds []discovery.Addition) (*corev1.Pod, map[string]string, map[string]bool) {
	userSet := map[string]bool{}
	full := cluster.With(nsAdds).Value()
	userVal := map[string]func() string{
		"HTTP_PROXY": func() string {
			return pick(r, "http://proxy.corp:3128", "http://10.1.2.3:8080", "http://[fd00::10]:3128")
		},
		"HTTPS_PROXY": func() string { return pick(r, "http://proxy.corp:3128", "http://10.1.2.3:8080") },
		"NO_PROXY":    func() string { return full + pick(r, "", ",.corp", ",db.corp,10.9.0.0/16") },
	}
	mkEnv := func(name string) []corev1.EnvVar {
		var env []corev1.EnvVar
		defer func() {
			for _, e := range env {
				if strings.HasSuffix(strings.ToUpper(e.Name), "_PROXY") {
					userSet[name] = true
				}
			}
		}()
		for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
			val := userVal[v]()
			switch r.IntN(6) {
			case 0:
				env = append(env, corev1.EnvVar{Name: v, Value: val})
			case 1:
				env = append(env, corev1.EnvVar{Name: strings.ToLower(v), Value: val})
			case 2:
				env = append(env, corev1.EnvVar{Name: v, Value: val}, corev1.EnvVar{Name: strings.ToLower(v), Value: val})
			case 3:
				// From a Secret: egret cannot read it and must keep both cases tied.
				env = append(env, corev1.EnvVar{Name: v, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "proxy"}, Key: v}}})
			}
		}
		if r.IntN(4) == 0 {
			env = append(env, corev1.EnvVar{Name: "JAVA_TOOL_OPTIONS", Value: pick(r, "-Xmx512m", "-Dfile.encoding=UTF-8 -Xss1m")})
		}
		if r.IntN(4) == 0 {
			env = append(env, corev1.EnvVar{Name: "LOG_LEVEL", Value: "debug"})
		}
		return env
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "shop"}}
	for i := range 1 + r.IntN(3) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i),
			Image: pick(r, "app:1", "python:3.13", "node:24", "eclipse-temurin:21", "golang:1.26", "curlimages/curl:8"), Env: mkEnv(fmt.Sprintf("c%d", i))})
	}
	if r.IntN(2) == 0 {
		p.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: pick(r, "migrate:1", "python:3.13"), Env: mkEnv("migrate")}}
	}
	ann := map[string]string{}
	if m := pick(r, "", "gateway", "sidecar", "transparent"); m != "" {
		ann[ModeAnnotation] = m
	}
	return p, ann, userSet
}

// TestInjectionPassesValidation is the property that egret's own injection
// passes egret's own validation: for generated cluster shapes (single- and
// dual-stack, IPv6-only, various ranges, domains, metadata addresses and
// additions) and pods (user proxy variables in either case, from Secrets,
// every mode), Validate under enforce finds no error in Mutate's output (and
// no warning about a container whose proxy variables are all egret's), and
// Mutate of that output changes nothing. A failure prints its seed: rerun
// with -property-seed=N.
func TestInjectionPassesValidation(t *testing.T) {
	seed := *propertySeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun: go test ./internal/webhook -run TestInjectionPassesValidation -property-seed=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 0x6567726574))
	n := *propertyN
	if testing.Short() {
		n = min(n, 50)
	}
	for i := range n {
		s := genShape(r)
		cluster := discovery.Compute(s.in, s.opts)
		nsAnn := map[string]string{}
		if r.IntN(3) == 0 {
			nsAnn[discovery.NoProxyAnnotation] = pick(r, "db.payments.corp", "10.77.0.0/16,.payments.internal")
		}
		namespace := ns("shop", optedIn, nsAnn)
		nsAdds, err := discovery.NamespaceAdditions(namespace)
		if err != nil {
			t.Fatal(err)
		}
		p, ann, userSet := genPod(r, cluster, nsAdds)
		p.Annotations = ann
		policy := testPolicy(t, func(c *Config) {
			c.Validation = "enforce"
			c.Mode = pick(r, "gateway", "sidecar", "transparent")
			c.NativeSidecars = r.IntN(5) != 0
			c.UpstreamSecret = pick(r, "", "egret-upstream")
		})
		in := Input{Policy: policy, Namespace: namespace, Cluster: cluster}
		m := Mutate(p, in)
		fail := func(format string, args ...any) {
			t.Helper()
			y, _ := yaml.Marshal(m.Pod)
			t.Fatalf("case %d (seed %d, %s cluster, NO_PROXY %s): %s\nmutated pod:\n%s", i, seed, s.name, cluster.Value(), fmt.Sprintf(format, args...), y)
		}
		if m.Denied != "" {
			if strings.Contains(m.Denied, "native sidecars") && !policy.NativeSidecars && policy.Gateway == nil {
				continue
			}
			fail("denied: %s", m.Denied)
		}
		v := Validate(m.Pod, in)
		var findings []string
		for _, f := range v.Findings {
			// Errors never; warnings only about values the user set.
			if f.Severity >= lint.Error || (f.Severity >= lint.Warning && !userSet[f.Container]) {
				findings = append(findings, findingText(f))
			}
		}
		if v.Denied != "" || len(findings) > 0 {
			fail("egret's own injection fails egret's validation:\n%s\n%s", v.Denied, strings.Join(findings, "\n"))
		}
		// egret's own sidecar must accept the NO_PROXY it is given.
		for _, c := range m.Pod.Spec.InitContainers {
			if c.Name != SidecarName {
				continue
			}
			for _, e := range c.Env {
				if strings.EqualFold(e.Name, "NO_PROXY") {
					if _, errs := noproxy.Parse(e.Value); len(errs) > 0 {
						fail("the sidecar's %s is refused by egret's proxy: %v", e.Name, errs)
					}
				}
			}
		}
		again := Mutate(m.Pod, in)
		if again.Denied != "" || !equality.Semantic.DeepEqual(again.Pod, m.Pod) {
			y, _ := yaml.Marshal(again.Pod)
			fail("not idempotent: denied %q, mutated again:\n%s", again.Denied, y)
		}
	}
}

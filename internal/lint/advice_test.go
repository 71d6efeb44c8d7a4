package lint

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestAdviceFixesTheFinding applies what a message says to change and
// checks the rule is then quiet: the advice is exact, not just a hint.
func TestAdviceFixesTheFinding(t *testing.T) {
	clusters := map[string]Cluster{
		"default": {},
		"with-cidrs": {CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("10.244.0.0/16")},
			APIServerIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")}},
		"metadata-v4-v6": {MetadataAddrs: []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}},
		"no-metadata":    {MetadataAddrs: []netip.Addr{}},
	}
	images := []string{"busybox", "python:3.12-slim", "node:24", "curlimages/curl"}
	for cname, cl := range clusters {
		for _, image := range images {
			t.Run(cname+"-"+strings.NewReplacer(":", "-", "/", "-", ".", "-").Replace(image), func(t *testing.T) {
				proxyEnv := env("HTTP_PROXY", "http://proxy:3128", "http_proxy", "http://proxy:3128", "HTTPS_PROXY", "http://proxy:3128", "https_proxy", "http://proxy:3128", "NODE_USE_ENV_PROXY", "1")
				spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image, Env: proxyEnv}}}
				in := PodInput{Object: ObjectRef{Kind: "Pod", Name: "x"}, Spec: spec, Cluster: cl}
				var value string
				for _, f := range CheckPod(in) {
					if f.Rule == idNoProxyMissing {
						_, value, _ = strings.Cut(f.Message, "set NO_PROXY and no_proxy to ")
					}
				}
				if value == "" {
					t.Fatal("no-proxy-missing gave no value")
				}
				spec.Containers[0].Env = append(proxyEnv, env("NO_PROXY", value, "no_proxy", value)...)
				for _, f := range CheckPod(in) {
					if strings.HasPrefix(f.Rule, "no-proxy-") && f.Severity >= Warning {
						t.Errorf("after applying %q: %s: %s", value, f.Rule, f.Message)
					}
				}
			})
		}
	}
	t.Run("jvm-suggestion", func(t *testing.T) {
		np := goodNP
		base := env("HTTPS_PROXY", "http://proxy:3128", "https_proxy", "http://proxy:3128", "HTTP_PROXY", "http://proxy:3128", "http_proxy", "http://proxy:3128", "NO_PROXY", np, "no_proxy", np)
		spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "eclipse-temurin:21", Env: base}}}
		in := PodInput{Object: ObjectRef{Kind: "Pod", Name: "x"}, Spec: spec}
		var opts string
		for _, f := range CheckPod(in) {
			if f.Rule == idJVMProxyProps {
				_, opts, _ = strings.Cut(f.Message, `JAVA_TOOL_OPTIONS="`)
				opts = strings.TrimSuffix(opts, `"`)
			}
		}
		if opts == "" {
			t.Fatal("jvm-proxy-properties gave no JAVA_TOOL_OPTIONS")
		}
		spec.Containers[0].Env = append(base, env("JAVA_TOOL_OPTIONS", opts)...)
		if fs := CheckPod(in); len(fs) > 0 {
			t.Errorf("after applying JAVA_TOOL_OPTIONS=%q:\n%s", opts, textOf(fs))
		}
	})
}

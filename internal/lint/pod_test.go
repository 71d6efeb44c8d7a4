package lint

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// mapResolver is a Resolver over fixed maps; notFound makes a missing
// object ErrNotFound (the webhook's view) instead of ErrUnavailable.
type mapResolver struct {
	cms, secrets map[string]map[string]string
	notFound     bool
}

func (r mapResolver) lookup(m map[string]map[string]string, ns, name string) (map[string]string, error) {
	if d, ok := m[ns+"/"+name]; ok {
		return d, nil
	}
	if r.notFound {
		return nil, fmt.Errorf("%s/%s: %w", ns, name, ErrNotFound)
	}
	return nil, fmt.Errorf("%s/%s: %w", ns, name, ErrUnavailable)
}

func (r mapResolver) ConfigMap(ns, name string) (map[string]string, error) {
	return r.lookup(r.cms, ns, name)
}

func (r mapResolver) Secret(ns, name string) (map[string]string, error) {
	return r.lookup(r.secrets, ns, name)
}

func env(kv ...string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

const goodNP = "localhost,127.0.0.1,::1,[::1],.svc,.cluster.local,kubernetes,kubernetes.default,kubernetes.default.svc,kubernetes.default.svc.cluster.local,169.254.169.254"

// allCases sets HTTP(S)_PROXY and NO_PROXY in both cases.
func allCases(proxy, np string) []corev1.EnvVar {
	return env("HTTP_PROXY", proxy, "http_proxy", proxy, "HTTPS_PROXY", proxy, "https_proxy", proxy, "NO_PROXY", np, "no_proxy", np)
}

func ruleIDs(fs []Finding) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range fs {
		if !seen[f.Rule] {
			seen[f.Rule] = true
			out = append(out, f.Rule)
		}
	}
	sort.Strings(out)
	return out
}

func TestCheckPod(t *testing.T) {
	yes := true
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name    string
		spec    corev1.PodSpec
		res     Resolver
		cluster Cluster
		ann     map[string]string
		want    []string // rule IDs, sorted
		wantIn  string   // a substring one message must contain
	}{
		{name: "no-proxy-vars-quiet", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "nginx", Env: env("FOO", "bar")}}}},
		{name: "complete-quiet", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: allCases("http://proxy:3128", goodNP)}}}},
		{name: "missing-no-proxy", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			Env: env("HTTPS_PROXY", "http://proxy:3128", "https_proxy", "http://proxy:3128")}}},
			want: []string{idNoProxyMissing}},
		{name: "empty-proxy-is-not-a-proxy", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			Env: env("HTTPS_PROXY", "", "https_proxy", "")}}}},
		{name: "expansion-from-secret-is-not-a-plain-credential",
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: append([]corev1.EnvVar{
				{Name: "HTTPS_PROXY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "p"}, Key: "url"}}},
			}, env("https_proxy", "$(HTTPS_PROXY)", "NO_PROXY", goodNP, "no_proxy", goodNP)...)}}},
			res: mapResolver{secrets: map[string]map[string]string{"default/p": {"url": "https://u:s3cret@proxy:3128"}}}},
		{name: "short-name-via-proxy", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			Env: append(env("PAYMENTS_URL", "http://payments:8080/v1", "LEDGER", "grpc://ledger.default:50051", "FULL", "http://payments.default.svc.cluster.local:8080", "EXT", "https://api.example.com"),
				env("HTTPS_PROXY", "http://proxy:3128", "https_proxy", "http://proxy:3128", "HTTP_PROXY", "http://proxy:3128", "http_proxy", "http://proxy:3128", "NO_PROXY", goodNP, "no_proxy", goodNP)...)}}},
			want: []string{idShortNameViaProxy}, wantIn: "use payments.default.svc.cluster.local"},
		{name: "short-name-in-no-proxy", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			Env: append(env("PAYMENTS_URL", "http://payments:8080/v1"),
				env("HTTPS_PROXY", "http://proxy:3128", "https_proxy", "http://proxy:3128", "HTTP_PROXY", "http://proxy:3128", "http_proxy", "http://proxy:3128", "NO_PROXY", goodNP+",payments", "no_proxy", goodNP+",payments")...)}}}},
		{name: "short-name-without-proxy", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			Env: env("PAYMENTS_URL", "http://payments:8080/v1")}}}},
		{name: "escaped-expansion-stays-literal",
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: append(env("X", "http://p:1"), env("HTTPS_PROXY", "$$(X)", "https_proxy", "$(X)", "NO_PROXY", goodNP, "no_proxy", goodNP)...)}}},
			want: []string{idCaseMismatch, idURLScheme}},
		{name: "config-map-credentials", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}}}},
			res: mapResolver{cms: map[string]map[string]string{"default/cm": {
				"HTTPS_PROXY": "http://u:pw@proxy:3128", "https_proxy": "http://u:pw@proxy:3128", "NO_PROXY": goodNP, "no_proxy": goodNP}}},
			want: []string{idCredentialsCleartext, idCredentialsInValue}, wantIn: "in ConfigMap default/cm"},
		{name: "envfrom-prefix", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			EnvFrom: []corev1.EnvFromSource{{Prefix: "UP_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}}}},
			res: mapResolver{cms: map[string]map[string]string{"default/cm": {"HTTPS_PROXY": "http://proxy:3128"}}}},
		{name: "unavailable-envfrom-is-info-only", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "python:3.12",
			Env:     env("HTTPS_PROXY", "http://proxy:3128"),
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "np"}}}}}}},
			want: []string{idRefUnresolved}},
		{name: "webhook-not-found-is-error", res: mapResolver{notFound: true}, spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			Env: []corev1.EnvVar{{Name: "NO_PROXY", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "k"}}}}}}},
			want: []string{idRefMissing}},
		{name: "optional-missing-is-fine", res: mapResolver{notFound: true}, spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			Env: []corev1.EnvVar{{Name: "NO_PROXY", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "k", Optional: &yes}}}}}}}},
		{name: "cluster-cidrs-and-api-ip", cluster: Cluster{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, APIServerIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")}},
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: allCases("http://proxy:3128", goodNP)}}},
			want: []string{idNoProxyIncomplete}, wantIn: "cluster range 10.96.0.0/12 is not in NO_PROXY"},
		{name: "metadata-address-missing-by-default",
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: allCases("http://proxy:3128", strings.TrimSuffix(goodNP, ",169.254.169.254"))}}},
			want: []string{idNoProxyIncomplete}, wantIn: "the cloud metadata address (http://169.254.169.254/) would go to the proxy in go, curl; add 169.254.169.254"},
		{name: "metadata-address-configured-ipv6", cluster: Cluster{MetadataAddrs: []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}},
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: allCases("http://proxy:3128", goodNP)}}},
			want: []string{idNoProxyIncomplete}, wantIn: "the cloud metadata address (http://[fd00:ec2::254]/) would go to the proxy in go, curl; add fd00:ec2::254,[fd00:ec2::254]"},
		{name: "metadata-check-disabled", cluster: Cluster{MetadataAddrs: []netip.Addr{}},
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: allCases("http://proxy:3128", strings.TrimSuffix(goodNP, ",169.254.169.254"))}}}},
		{name: "api-ip-via-service-host-variable", cluster: Cluster{APIServerIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")}},
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: allCases("http://proxy:3128", goodNP+",$(KUBERNETES_SERVICE_HOST)")}}}},
		{name: "ignore-annotation", ann: map[string]string{IgnoreAnnotation: "no-proxy-missing, proxy-var-single-case"},
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: env("HTTPS_PROXY", "http://proxy:3128")}}}},
		{name: "native-sidecar-quiet", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "egret", Image: "ghcr.io/egret-io/egret:1", RestartPolicy: &always, Args: []string{"proxy"}}},
			Containers:     []corev1.Container{{Name: "a", Image: "busybox", Env: allCases("http://127.0.0.1:3128", goodNP)}}}},
		{name: "init-proxy-without-restart-policy", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "squid", Image: "ubuntu/squid:6"}},
			Containers:     []corev1.Container{{Name: "a", Image: "busybox"}}},
			want: []string{idSidecarNotNative}, wantIn: "never starts"},
		{name: "egret-iptables-init-is-not-a-proxy", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "ghcr.io/egret-io/egret:1", Args: []string{"iptables", "apply"}}},
			Containers:     []corev1.Container{{Name: "a", Image: "busybox"}}}},
		{name: "proxy-alone-is-a-gateway-not-a-sidecar", spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "squid", Image: "ubuntu/squid", Ports: []corev1.ContainerPort{{ContainerPort: 3128}}}}}},
		{name: "node-exporter-is-not-node", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "prom/node-exporter:v1", Env: allCases("http://proxy:3128", goodNP)}}}},
		{name: "node-options-flag", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "node:24",
			Env: append(allCases("http://proxy:3128", goodNP), env("NODE_OPTIONS", "--use-env-proxy")...)}}}},
		{name: "jvm-by-env", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "corp/app",
			Env: append(allCases("http://proxy:3128", goodNP), env("JAVA_OPTS", "-Xmx1g")...)}}},
			want: []string{idJVMProxyProps}, wantIn: "-Dhttp.proxyHost=proxy -Dhttp.proxyPort=3128"},
		{name: "jvm-https-only-props", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "openjdk:17",
			Env: append(allCases("http://proxy:3128", goodNP), env("JAVA_TOOL_OPTIONS", "-Dhttp.proxyHost=proxy -Dhttp.proxyPort=3128 -Dhttp.nonProxyHosts=*.svc|*.cluster.local")...)}}},
			want: []string{idJVMProxyProps}, wantIn: "-Dhttps.proxyHost is not"},
		{name: "jvm-no-non-proxy-hosts", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "openjdk:17",
			Env: env("JAVA_TOOL_OPTIONS", "-Dhttps.proxyHost=proxy -Dhttps.proxyPort=3128")}}},
			want: []string{idJVMNonProxyHosts}, wantIn: "*.svc|*.cluster.local"},
		{name: "curl-in-shell-script", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "alpine:3",
			Command: []string{"sh", "-c", "while true; do curl -s http://x; sleep 5; done"},
			Env:     env("HTTP_PROXY", "http://proxy:3128", "NO_PROXY", goodNP, "no_proxy", goodNP)}}},
			want: []string{idCurlUpper}},
		{name: "unexpected-proxy", cluster: Cluster{Proxy: "http://127.0.0.1:3128"},
			spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox", Env: allCases("http://u:pw@other:8080", goodNP)}}},
			want: []string{idCredentialsCleartext, idCredentialsInValue, idProxyUnexpected}, wantIn: "http://u:xxxxx@other:8080"},
		{name: "empty-lower-shadows-upper", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			Env: env("HTTPS_PROXY", "http://proxy:3128", "https_proxy", "", "NO_PROXY", goodNP, "no_proxy", goodNP)}}},
			want: []string{idCaseMismatch}, wantIn: "https_proxy is empty"},
		{name: "python-cidr-entry", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "python:3.12-slim", Env: allCases("http://proxy:3128", goodNP+",10.96.0.0/12")}}},
			want: []string{idNoProxyIgnored}, wantIn: "python-urllib"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			fs := CheckPod(PodInput{Object: ObjectRef{Kind: "Pod", Name: "p"}, Spec: &spec, Resolver: tc.res, Cluster: tc.cluster, Annotations: tc.ann})
			got := ruleIDs(fs)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("rules = %v, want %v\n%s", got, tc.want, textOf(fs))
			}
			if tc.wantIn != "" {
				found := false
				for _, f := range fs {
					found = found || strings.Contains(f.Message, tc.wantIn)
				}
				if !found {
					t.Errorf("no message contains %q:\n%s", tc.wantIn, textOf(fs))
				}
			}
			for _, f := range fs {
				if f.Field == "" || !strings.HasPrefix(f.Field, "spec.") {
					t.Errorf("finding %s has field %q", f.Rule, f.Field)
				}
				for _, secret := range []string{"s3cret", ":pw@", "S3cret"} {
					if strings.Contains(f.Message, secret) {
						t.Errorf("message leaks a secret: %s", f.Message)
					}
				}
			}
		})
	}
}

func TestCheckPodNilSpec(t *testing.T) {
	if fs := CheckPod(PodInput{}); fs != nil {
		t.Fatalf("nil spec gave %v", fs)
	}
}

func TestParseProxyURL(t *testing.T) {
	for _, tc := range []struct {
		name, in        string
		host, port      string
		pass, bad, user bool
	}{
		{name: "plain", in: "http://proxy:3128", host: "proxy", port: "3128"},
		{name: "encoded", in: "http://u:p%40ss@proxy:3128", host: "proxy", port: "3128", user: true, pass: true},
		{name: "raw-at", in: "http://u:p@ss@proxy:3128", host: "proxy", port: "3128", user: true, pass: true, bad: true},
		{name: "raw-hash", in: "http://u:p#ss@proxy:3128", host: "proxy", port: "3128", user: true, pass: true, bad: true},
		{name: "raw-slash", in: "http://u:p/ss@proxy:3128", host: "proxy", port: "3128", user: true, pass: true, bad: true},
		{name: "bad-percent", in: "http://u:100%@proxy:3128", host: "proxy", port: "3128", user: true, pass: true, bad: true},
		{name: "colon-in-password-is-fine", in: "http://u:a:b@proxy:3128", host: "proxy", port: "3128", user: true, pass: true},
		{name: "user-only", in: "http://u@proxy", host: "proxy", user: true},
		{name: "ipv6", in: "http://[fd00::1]:3128/", host: "fd00::1", port: "3128"},
		{name: "no-scheme", in: "proxy.corp:8080", host: "proxy.corp", port: "8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := parseProxyURL(tc.in)
			if u.host != tc.host || u.port != tc.port || u.password != tc.pass || u.badUserinfo != tc.bad || u.userinfo != tc.user {
				t.Errorf("parseProxyURL(%q) = %+v", tc.in, u)
			}
		})
	}
}

func TestImageDetection(t *testing.T) {
	for _, tc := range []struct {
		image string
		want  runtime
		not   bool
	}{
		{image: "python:3.12-slim", want: rtPython},
		{image: "docker.io/library/python@sha256:abc", want: rtPython},
		{image: "gcr.io/distroless/python3-debian12", want: rtPython},
		{image: "node:22-alpine", want: rtNode},
		{image: "gcr.io/distroless/nodejs20-debian12", want: rtNode},
		{image: "mcr.microsoft.com/devcontainers/javascript-node:20", want: rtNode},
		{image: "prom/node-exporter:v1.8", want: rtNode, not: true},
		{image: "javascript-node", want: rtJVM, not: true},
		{image: "eclipse-temurin:21-jre", want: rtJVM},
		{image: "gcr.io/distroless/java17-debian12", want: rtJVM},
		{image: "amazoncorretto:21", want: rtJVM},
		{image: "curlimages/curl:8.10.1", want: rtCurl},
		{image: "localhost:5000/curl", want: rtCurl},
	} {
		t.Run(strings.NewReplacer("/", "-", ":", "-", "@", "-").Replace(tc.image), func(t *testing.T) {
			c := &corev1.Container{Image: tc.image}
			got := detectRuntimes(c, &environment{vars: map[string]*envVar{}}, false).has(tc.want)
			if got == tc.not {
				t.Errorf("detectRuntimes(%q).has(%d) = %v", tc.image, tc.want, got)
			}
		})
	}
}

func TestFieldLess(t *testing.T) {
	in := []string{"spec.containers[10]", "spec.containers[2].env[1]", "spec.containers[2]", "spec.containers[2].env[10]", "spec.containers[2].env[9]"}
	sort.Slice(in, func(i, j int) bool { return fieldLess(in[i], in[j]) })
	want := "spec.containers[2],spec.containers[2].env[1],spec.containers[2].env[9],spec.containers[2].env[10],spec.containers[10]"
	if got := strings.Join(in, ","); got != want {
		t.Errorf("sorted = %s", got)
	}
}

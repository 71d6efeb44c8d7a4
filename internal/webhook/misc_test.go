package webhook

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/version"

	"egret.io/egret/internal/discovery"
)

func TestNativeSidecarsSupported(t *testing.T) {
	tests := []struct {
		name string
		v    *version.Info
		want bool
	}{
		{"1.37", &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}, true},
		{"1.29-beta-on", &version.Info{Major: "1", Minor: "29"}, true},
		{"1.28-alpha-off", &version.Info{Major: "1", Minor: "28"}, false},
		{"provider-plus", &version.Info{Major: "1", Minor: "30+", GitVersion: "v1.30.4-eks-a737599"}, true},
		{"only-git-version", &version.Info{GitVersion: "v1.31.0-gke.1"}, true},
		{"unstamped-dev-build", &version.Info{GitVersion: "v0.0.0-master+$Format:%H$"}, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NativeSidecarsSupported(tt.v); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCertRenewal drives the self-managed CA through time without an API
// server: create, keep, renew the serving certificate, rotate the CA.
func TestCertRenewal(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &CertManager{Hosts: []string{"egret-webhook.egret-system.svc", "127.0.0.1"}, Now: func() time.Time { return now }}
	d1, changed, err := m.renew(nil)
	if err != nil || !changed {
		t.Fatalf("create: %v %v", changed, err)
	}
	leaf, _, err := parsePair(d1[SecretCert], d1[SecretKey])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caBundle(d1, now))
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "egret-webhook.egret-system.svc", CurrentTime: now}); err != nil {
		t.Errorf("serving cert does not verify: %v", err)
	}
	if len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "127.0.0.1" {
		t.Errorf("ip SANs: %v", leaf.IPAddresses)
	}

	if _, changed, _ := m.renew(d1); changed {
		t.Error("a fresh certificate was renewed")
	}
	now = now.Add(340 * 24 * time.Hour) // 25 days before the leaf expires
	d2, changed, err := m.renew(d1)
	if err != nil || !changed || string(d2[SecretCACert]) != string(d1[SecretCACert]) || string(d2[SecretCert]) == string(d1[SecretCert]) {
		t.Fatalf("leaf renewal: changed=%v err=%v (CA must stay)", changed, err)
	}
	m.Hosts = append(m.Hosts, "egret-webhook.egret-system.svc.cluster.local")
	if _, changed, _ := m.renew(d2); !changed {
		t.Error("new host name did not reissue the certificate")
	}
	now = now.Add(9 * 365 * 24 * time.Hour) // within a year of the CA's end
	d3, changed, err := m.renew(d2)
	if err != nil || !changed || string(d3[SecretCACert]) == string(d2[SecretCACert]) || string(d3[SecretPrevCACert]) != string(d2[SecretCACert]) {
		t.Fatalf("CA rotation: changed=%v err=%v", changed, err)
	}
	if b := string(caBundle(d3, now)); strings.Count(b, "BEGIN CERTIFICATE") != 2 {
		t.Errorf("bundle during CA rotation holds %d CAs, want 2", strings.Count(b, "BEGIN CERTIFICATE"))
	}
	if _, err := m.GetCertificate(nil); err == nil {
		t.Error("GetCertificate before Ensure succeeded")
	}
	_ = context.Background()
}

func TestValidate(t *testing.T) {
	cluster := testCluster()
	bad := pod(nil,
		corev1.EnvVar{Name: "HTTP_PROXY", Value: "http://proxy.corp:3128"}, corev1.EnvVar{Name: "http_proxy", Value: "http://proxy.corp:3128"},
		corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://proxy.corp:3128"}, corev1.EnvVar{Name: "https_proxy", Value: "http://proxy.corp:3128"},
		corev1.EnvVar{Name: "NO_PROXY", Value: "localhost"}, corev1.EnvVar{Name: "no_proxy", Value: "localhost"})
	t.Run("enforce-denies-naming-what-is-missing", func(t *testing.T) {
		res := Validate(bad, Input{Policy: testPolicy(t, func(c *Config) { c.Validation = "enforce" }), Namespace: ns("shop", nil, nil), Cluster: cluster})
		for _, want := range []string{"no-proxy-incomplete", "container app", ".svc", "10.96.0.0/16", "10.244.0.0/23"} {
			if !strings.Contains(res.Denied, want) {
				t.Errorf("denial lacks %q:\n%s", want, res.Denied)
			}
		}
	})
	t.Run("warn-admits-with-warnings", func(t *testing.T) {
		res := Validate(bad, Input{Policy: testPolicy(t, nil), Namespace: ns("shop", nil, nil), Cluster: cluster})
		if res.Denied != "" || len(res.Warnings) == 0 || !strings.Contains(strings.Join(res.Warnings, "\n"), "no-proxy-incomplete") {
			t.Errorf("denied=%q warnings=%q", res.Denied, res.Warnings)
		}
	})
	t.Run("off-and-excluded-pass", func(t *testing.T) {
		if res := Validate(bad, Input{Policy: testPolicy(t, func(c *Config) { c.Validation = "off" }), Cluster: cluster}); len(res.Findings) != 0 {
			t.Errorf("off: %v", res.Findings)
		}
		if res := Validate(bad, Input{Policy: testPolicy(t, func(c *Config) { c.Validation = "enforce" }), Namespace: ns("kube-system", nil, nil), Cluster: cluster}); res.Denied != "" {
			t.Errorf("kube-system denied: %s", res.Denied)
		}
	})
	// A short Service name in the environment goes to the gateway, which
	// cannot resolve it as the pod does; the sidecar (in the pod) can.
	for mode, warns := range map[string]bool{"gateway": true, "sidecar": false} {
		t.Run("short-name-"+mode, func(t *testing.T) {
			in := Input{Policy: testPolicy(t, func(c *Config) { c.Mode = mode }), Namespace: ns("shop", optedIn, nil), Cluster: cluster}
			m := Mutate(pod(nil, corev1.EnvVar{Name: "PAYMENTS_URL", Value: "http://payments:8080"}), in)
			all := strings.Join(Validate(m.Pod, in).Warnings, "\n")
			if got := strings.Contains(all, "short-name-via-proxy") && strings.Contains(all, "payments.shop.svc.cluster.local"); got != warns {
				t.Errorf("warned=%v, want %v:\n%s", got, warns, all)
			}
		})
	}
	// What egret injects must pass egret's own rules, in every mode.
	for _, mode := range []string{"gateway", "sidecar", "transparent"} {
		t.Run("injected-pod-is-clean-"+mode, func(t *testing.T) {
			in := Input{Policy: testPolicy(t, func(c *Config) { c.Mode = mode; c.Validation = "enforce" }), Namespace: ns("shop", optedIn, nil), Cluster: cluster}
			m := Mutate(pod(nil), in)
			res := Validate(m.Pod, in)
			if res.Denied != "" || len(res.Warnings) != 0 {
				t.Errorf("injected pod: denied=%q warnings=%q", res.Denied, res.Warnings)
			}
		})
	}
}

// TestLintClusterMetadata: the validating webhook requires the metadata
// addresses discovery publishes (IPv6 ones only in a cluster with IPv6
// ranges), and none when discovery was told to leave them out.
func TestLintClusterMetadata(t *testing.T) {
	v4 := discovery.Inputs{ServiceCIDRs: map[string][]netip.Prefix{"kubernetes": {netip.MustParsePrefix("10.96.0.0/16")}}}
	dual := discovery.Inputs{ServiceCIDRs: map[string][]netip.Prefix{"kubernetes": {netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:96::/108")}}}
	tests := []struct {
		name string
		in   discovery.Inputs
		opts discovery.Options
		want string
	}{
		{"ipv4-cluster-default", v4, discovery.Options{}, "[169.254.169.254]"},
		{"dual-stack-default", dual, discovery.Options{}, "[169.254.169.254 fd00:ec2::254]"},
		{"left-out", v4, discovery.Options{MetadataAddresses: []string{}}, "[]"},
		{"custom", v4, discovery.Options{MetadataAddresses: []string{"100.100.100.200"}}, "[100.100.100.200]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := lintCluster(discovery.Compute(tt.in, tt.opts))
			if got := fmt.Sprint(c.MetadataAddrs); got != tt.want || c.MetadataAddrs == nil {
				t.Errorf("MetadataAddrs = %s (nil %v), want %s", got, c.MetadataAddrs == nil, tt.want)
			}
		})
	}
	if c := lintCluster(nil); c.MetadataAddrs != nil {
		t.Errorf("no discovery: MetadataAddrs = %v, want nil (lint's default)", c.MetadataAddrs)
	}
}

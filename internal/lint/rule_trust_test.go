package lint

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"egret.io/egret/internal/trust"
)

func TestTLSCAMissing(t *testing.T) {
	cl := Cluster{InterceptingProxies: []string{"proxy.corp:3128"}}
	proxied := env("HTTP_PROXY", "http://proxy.corp:3128", "HTTPS_PROXY", "http://proxy.corp:3128", "https_proxy", "http://proxy.corp:3128",
		"http_proxy", "http://proxy.corp:3128", "NO_PROXY", goodNP, "no_proxy", goodNP)
	injected := append(append([]corev1.EnvVar{}, proxied...), env(
		"SSL_CERT_FILE", "/etc/egret/trust/ca-bundle.pem", "REQUESTS_CA_BUNDLE", "/etc/egret/trust/ca-bundle.pem",
		"NODE_EXTRA_CA_CERTS", "/etc/egret/trust/ca-bundle.pem", "CURL_CA_BUNDLE", "/etc/egret/trust/ca-bundle.pem")...)
	for _, tc := range []struct {
		name, image string
		env         []corev1.EnvVar
		cluster     Cluster
		want        string // substring of the finding; "" = none
	}{
		{"python-without-ca", "python:3.12", proxied, cl, "no CA bundle reaches the clients that read SSL_CERT_FILE (Go, OpenSSL, Ruby, .NET), Python requests and Python's ssl in this container: set SSL_CERT_FILE, REQUESTS_CA_BUNDLE"},
		// An image lint cannot read the runtimes of (the real node's
		// runtimes image): the finding names the SSL_CERT_FILE model, not
		// "go", and reads as a sentence.
		{"unknown-image", "localhost/runtimes:1", proxied, cl, "but no CA bundle reaches the clients that read SSL_CERT_FILE (Go, OpenSSL, Ruby, .NET) in this container: set SSL_CERT_FILE to"},
		{"python-only-ssl-cert-file", "python:3.12", append(append([]corev1.EnvVar{}, proxied...), env("SSL_CERT_FILE", "/ca.pem")...), cl, "reaches Python requests in this container"},
		{"node-and-go-with-ca", "node:22", injected, cl, ""},
		{"jvm-needs-the-store", "eclipse-temurin:21", append(append([]corev1.EnvVar{}, injected...), env("JAVA_TOOL_OPTIONS", "-Dhttps.proxyHost=proxy.corp -Dhttps.proxyPort=3128")...), cl, "reaches the JVM in this container"},
		{"jvm-with-store", "eclipse-temurin:21", append(append([]corev1.EnvVar{}, injected...), env("JAVA_TOOL_OPTIONS", "-Dhttps.proxyHost=proxy.corp -Dhttps.proxyPort=3128 -Djavax.net.ssl.trustStore=/etc/egret/trust/truststore.p12")...), cl, ""},
		{"other-proxy-not-intercepting", "python:3.12", env("HTTPS_PROXY", "http://other:3128", "https_proxy", "http://other:3128"), cl, ""},
		{"no-intercepting-proxy-configured", "python:3.12", proxied, Cluster{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: tc.image, Env: tc.env}}}
			var got []string
			for _, f := range CheckPod(PodInput{Object: ObjectRef{Kind: "Pod", Name: "x"}, Spec: spec, Cluster: tc.cluster}) {
				if f.Rule == idTLSCAMissing {
					got = append(got, f.Message)
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("unexpected finding: %q", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("findings %q, want %q", got, tc.want)
			}
		})
	}
}

func caCert(t *testing.T, cn string) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

func TestJVMTrustStoreIncomplete(t *testing.T) {
	corp := caCert(t, "Corp Root")
	var full []*x509.Certificate
	for i := 0; i < minPublicRoots; i++ {
		full = append(full, caCert(t, fmt.Sprintf("Public Root %d", i)))
	}
	store := func(cs ...*x509.Certificate) string {
		p, err := (&trust.Bundle{Certs: cs}).TrustStore(nil)
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(p)
	}
	manifest := func(p12 string) string {
		return `apiVersion: v1
kind: ConfigMap
metadata: {name: corp-trust, namespace: shop}
binaryData:
  cacerts.p12: ` + p12 + `
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: orders, namespace: shop}
spec:
  template:
    spec:
      volumes:
      - name: trust
        configMap: {name: corp-trust}
      containers:
      - name: app
        image: eclipse-temurin:21
        volumeMounts: [{name: trust, mountPath: /etc/trust}]
        env:
        - name: JAVA_TOOL_OPTIONS
          value: -Djavax.net.ssl.trustStore=/etc/trust/cacerts.p12 -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=changeit
`
	}
	for _, tc := range []struct {
		name, p12, want string
	}{
		{"corporate-ca-alone", store(corp), "holds only 1 certificate(s) (Corp Root) and replaces the JDK's cacerts"},
		{"system-roots-and-corporate-ca", store(append(full, corp)...), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Read("m.yaml", []byte(manifest(tc.p12)))
			if err != nil {
				t.Fatal(err)
			}
			fs, err := Check(objs, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range fs {
				if f.Rule == idJVMTrustStore {
					got = append(got, f.Message)
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("unexpected finding: %q", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("findings %q, want %q", got, tc.want)
			}
		})
	}
}

// TestInjectedVarsAreNotRuntimes: in a pod egret injected, the variables
// the webhook adds to every container (NODE_USE_ENV_PROXY, JAVA_TOOL_OPTIONS)
// do not make a curl container a Node.js or JVM one (the real node's lint of
// an injected curl container named "go, node, java"); in a pod egret did not
// inject they still count.
func TestInjectedVarsAreNotRuntimes(t *testing.T) {
	cl := Cluster{InterceptingProxies: []string{"proxy.corp:3128"}}
	vars := env("HTTPS_PROXY", "http://proxy.corp:3128", "https_proxy", "http://proxy.corp:3128", "NO_PROXY", goodNP, "no_proxy", goodNP,
		"NODE_USE_ENV_PROXY", "1", "JAVA_TOOL_OPTIONS", "-Dhttps.proxyHost=proxy.corp -Dhttps.proxyPort=3128")
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "curlimages/curl:8.11.0", Env: vars}}}
	for _, tc := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{InjectedAnnotation: "gateway"}, "reaches the clients that read SSL_CERT_FILE (Go, OpenSSL, Ruby, .NET) and curl in this container"},
		{nil, "reaches the clients that read SSL_CERT_FILE (Go, OpenSSL, Ruby, .NET), Node.js, the JVM and curl in this container"},
	} {
		var got []string
		for _, f := range CheckPod(PodInput{Object: ObjectRef{Kind: "Pod", Name: "x"}, Spec: spec, Cluster: cl, Annotations: tc.ann}) {
			if f.Rule == idTLSCAMissing {
				got = append(got, f.Message)
			}
		}
		if len(got) != 1 || !strings.Contains(got[0], tc.want) {
			t.Errorf("annotations %v: findings %q, want %q", tc.ann, got, tc.want)
		}
	}
}

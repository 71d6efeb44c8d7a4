package webhook

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"egret.io/egret/internal/testutil/tlslab"
)

// TestInterceptCertsEmptyConfigMap: the ConfigMap the install creates
// empty (deploy/components/intercept; the gateway fills it) adds no
// certificate and is no error — an error would hold the whole trust
// bundle, corporate CAs included, until a gateway publishes; a ConfigMap
// with something that is not a certificate still is one.
func TestInterceptCertsEmptyConfigMap(t *testing.T) {
	ca := tlslab.NewCA(t, "egret interception CA")
	for _, tc := range []struct {
		name    string
		data    map[string]string
		certs   int
		wantErr bool
	}{
		{"empty", nil, 0, false},
		{"published", map[string]string{"ca.crt": string(ca.PEM())}, 1, false},
		{"not-a-certificate", map[string]string{"ca.crt": "hello"}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "egret-system", Name: "egret-intercept-ca"}, Data: tc.data}
			c := &TrustController{Policy: &TrustPolicy{InterceptNamespace: "egret-system", InterceptName: "egret-intercept-ca"},
				icpt: fake.NewClientBuilder().WithObjects(cm).Build()}
			certs, err := c.interceptCerts(context.Background())
			if (err != nil) != tc.wantErr || len(certs) != tc.certs {
				t.Errorf("certs %d, err %v; want %d, error %v", len(certs), err, tc.certs, tc.wantErr)
			}
		})
	}
}

// TestTrustBuildWithoutCorporateSource: deploy/overlays/intercept names
// the corporate source corp-ca (components/trust), which a cluster with no
// intercepting corporate proxy never creates. The interception CA still
// makes the bundle (the real node found every pod of that install without
// one: no intercepted request could succeed); without an interception CA
// a missing source stays an error, so pods keep the last bundle.
func TestTrustBuildWithoutCorporateSource(t *testing.T) {
	ca := tlslab.NewCA(t, "egret interception CA")
	published := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "egret-system", Name: "egret-intercept-ca"},
		Data: map[string]string{"ca.crt": string(ca.PEM())}}
	for _, kind := range []string{"ConfigMap", "Secret"} {
		t.Run(kind, func(t *testing.T) {
			p := &TrustPolicy{Kind: kind, Namespace: "egret-system", Name: "corp-ca", Key: "trust-bundle.pem",
				InterceptNamespace: "egret-system", InterceptName: "egret-intercept-ca"}
			c := &TrustController{Policy: p, source: fake.NewClientBuilder().Build(), icpt: fake.NewClientBuilder().WithObjects(published).Build(),
				system: []*x509.Certificate{tlslab.NewCA(t, "a system root").Cert}}
			b, err := c.build(context.Background())
			if err != nil {
				t.Fatalf("no corporate source beside the interception CA: %v", err)
			}
			if len(b.bundle.Added) != 1 || !b.bundle.Added[0].Equal(ca.Cert) {
				t.Errorf("the bundle adds %d certificates, want the interception CA alone", len(b.bundle.Added))
			}
			c.icpt = nil
			if _, err := c.build(context.Background()); err == nil || !strings.Contains(err.Error(), "not found") {
				t.Errorf("no corporate source and no interception CA: %v, want the source's not-found error (pods keep the last bundle)", err)
			}
		})
	}
}

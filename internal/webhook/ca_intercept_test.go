package webhook

import (
	"context"
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

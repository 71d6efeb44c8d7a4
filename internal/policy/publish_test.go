package policy_test

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/trust"
)

// TestCAPublisherAgainstAPIServer: the gateway writes its interception
// CA's certificates to the ConfigMap the webhook's trust bundle reads —
// created, then updated for a rotation (both CAs), never with a key, and
// not rewritten when a replica publishes the same set in another order.
func TestCAPublisherAgainstAPIServer(t *testing.T) {
	c := requireCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := c.Namespace(t, "icpt-publish", nil)
	ca := func(cn string) *x509.Certificate {
		certPEM, keyPEM, err := intercept.GenerateCA(cn, time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, err := intercept.ParseAuthority(certPEM, keyPEM, nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return a.Cert
	}
	ca1, ca2 := ca("egret interception CA 1"), ca("egret interception CA 2")
	p := &policy.CAPublisher{Client: c.Clientset, Namespace: ns, Name: "egret-intercept-ca", Retry: 100 * time.Millisecond}
	p.Start(ctx)
	read := func(want ...*x509.Certificate) (string, string) {
		t.Helper()
		var data, rv string
		eventually(t, 10*time.Second, "the published ConfigMap", func() bool {
			cm, err := c.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, "egret-intercept-ca", metav1.GetOptions{})
			if err != nil {
				return false
			}
			data, rv = cm.Data[policy.CAConfigMapKey], cm.ResourceVersion
			certs, err := trust.ParsePEM([]byte(data))
			return err == nil && trust.Digest(certs) == trust.Digest(want)
		})
		if strings.Contains(data, "PRIVATE KEY") {
			t.Fatal("a key was published")
		}
		return data, rv
	}
	p.Publish([]*x509.Certificate{ca1})
	read(ca1)
	p.Publish([]*x509.Certificate{ca2, ca1}) // the switch: new CA in force, old one still trusted
	_, rv := read(ca1, ca2)
	p.Publish([]*x509.Certificate{ca1, ca2}) // another replica, the same set
	time.Sleep(500 * time.Millisecond)
	if _, rv2 := read(ca1, ca2); rv2 != rv {
		t.Errorf("the same set in another order rewrote the ConfigMap (%s → %s)", rv, rv2)
	}
	p.Publish([]*x509.Certificate{ca2}) // retired
	read(ca2)
}

package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Keys of the certificate Secret.
const (
	SecretCACert     = "ca.crt"
	SecretCAKey      = "ca.key"
	SecretPrevCACert = "ca-prev.crt" // the CA before the last CA rotation, trusted until it expires
	SecretCert       = "tls.crt"
	SecretKey        = "tls.key"
)

// Lifetimes of the self-managed certificates.
const (
	caLifetime      = 10 * 365 * 24 * time.Hour
	caRenewBefore   = 365 * 24 * time.Hour
	certLifetime    = 365 * 24 * time.Hour
	certRenewBefore = 30 * 24 * time.Hour
	certCheckEvery  = time.Minute
)

// CertManager is the self-managed CA: it keeps a CA and a serving
// certificate in a Secret (creating and renewing them), serves the
// certificate to the webhook server (GetCertificate, reloaded when the Secret
// changes), and writes the CA bundle into the webhook configurations. Every
// replica runs it; concurrent writers are settled by the API server's
// resourceVersion checks.
type CertManager struct {
	// Client is a direct (uncached) client: the manager must not cache every
	// Secret of the cluster.
	Client client.Client
	// Namespace and SecretName locate the Secret.
	Namespace, SecretName string
	// Hosts are the serving certificate's DNS names and IP addresses
	// (service.namespace.svc, ... or 127.0.0.1 in tests).
	Hosts []string
	// MutatingWebhooks and ValidatingWebhooks name the configurations
	// whose caBundle is kept current.
	MutatingWebhooks, ValidatingWebhooks []string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time

	cert   atomic.Pointer[tls.Certificate]
	bundle atomic.Pointer[[]byte]
}

func (m *CertManager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (m *CertManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := m.cert.Load()
	if c == nil {
		return nil, errors.New("webhook serving certificate not loaded yet")
	}
	return c, nil
}

// CABundle returns the PEM CA bundle clients must trust.
func (m *CertManager) CABundle() []byte {
	if b := m.bundle.Load(); b != nil {
		return *b
	}
	return nil
}

// Ready reports whether a certificate is loaded.
func (m *CertManager) Ready() bool { return m.cert.Load() != nil }

// NeedLeaderElection: every replica serves, so every replica needs the
// certificate.
func (m *CertManager) NeedLeaderElection() bool { return false }

// Start keeps the certificate current until ctx ends (a manager Runnable).
func (m *CertManager) Start(ctx context.Context) error {
	t := time.NewTicker(certCheckEvery)
	defer t.Stop()
	for {
		if err := m.Ensure(ctx); err != nil {
			log.FromContext(ctx).Error(err, "webhook certificate")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Ensure reads the Secret, creates or renews what is missing or expiring,
// loads the serving certificate and patches the webhook configurations.
func (m *CertManager) Ensure(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := m.ensureOnce(ctx)
		if err == nil || attempt >= 4 || !(apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) {
			return err
		}
		// Another replica wrote first: read its result.
	}
}

func (m *CertManager) ensureOnce(ctx context.Context) error {
	var s corev1.Secret
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.SecretName}
	err := m.Client.Get(ctx, key, &s)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get secret %s: %w", key, err)
	}
	data, changed, err := m.renew(s.Data)
	if err != nil {
		return err
	}
	if changed {
		s.Data = data
		s.Type = corev1.SecretTypeOpaque
		if !exists {
			s.ObjectMeta = metav1.ObjectMeta{Namespace: m.Namespace, Name: m.SecretName,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "egret", "app.kubernetes.io/part-of": "egret"}}
			err = m.Client.Create(ctx, &s)
		} else {
			err = m.Client.Update(ctx, &s)
		}
		if err != nil {
			return fmt.Errorf("write secret %s: %w", key, err)
		}
		log.FromContext(ctx).Info("webhook certificate written", "secret", key.String())
	}
	cert, err := tls.X509KeyPair(data[SecretCert], data[SecretKey])
	if err != nil {
		return fmt.Errorf("load serving certificate from %s: %w", key, err)
	}
	m.cert.Store(&cert)
	bundle := caBundle(data, m.now())
	m.bundle.Store(&bundle)
	return m.patchConfigurations(ctx, bundle)
}

// renew returns the Secret data with a valid CA and serving certificate,
// and whether it changed.
func (m *CertManager) renew(old map[string][]byte) (map[string][]byte, bool, error) {
	now := m.now()
	data := map[string][]byte{}
	for k, v := range old {
		data[k] = v
	}
	ca, caKey, err := parsePair(data[SecretCACert], data[SecretCAKey])
	changed := false
	if err != nil || now.Add(caRenewBefore).After(ca.NotAfter) {
		if err == nil { // rotating: keep trusting the old CA until it expires
			data[SecretPrevCACert] = data[SecretCACert]
		}
		certPEM, keyPEM, err := newCA(now)
		if err != nil {
			return nil, false, err
		}
		data[SecretCACert], data[SecretCAKey] = certPEM, keyPEM
		if ca, caKey, err = parsePair(certPEM, keyPEM); err != nil {
			return nil, false, err
		}
		delete(data, SecretCert)
		changed = true
	}
	leaf, _, err := parsePair(data[SecretCert], data[SecretKey])
	if err != nil || now.Add(certRenewBefore).After(leaf.NotAfter) || !sameHosts(leaf, m.Hosts) || leaf.CheckSignatureFrom(ca) != nil {
		certPEM, keyPEM, err := newServing(now, ca, caKey, m.Hosts)
		if err != nil {
			return nil, false, err
		}
		data[SecretCert], data[SecretKey] = certPEM, keyPEM
		changed = true
	}
	return data, changed, nil
}

func caBundle(data map[string][]byte, now time.Time) []byte {
	b := bytes.TrimSpace(data[SecretCACert])
	if prev, err := parseCert(data[SecretPrevCACert]); err == nil && now.Before(prev.NotAfter) {
		b = append(append(slices.Clone(b), '\n'), bytes.TrimSpace(data[SecretPrevCACert])...)
	}
	return append(slices.Clone(b), '\n')
}

func (m *CertManager) patchConfigurations(ctx context.Context, bundle []byte) error {
	var errs []error
	for _, name := range m.MutatingWebhooks {
		c := &admissionregistrationv1.MutatingWebhookConfiguration{}
		errs = append(errs, m.patchBundle(ctx, "mutatingwebhookconfiguration", name, c, bundle, func() (out []*[]byte) {
			for i := range c.Webhooks {
				out = append(out, &c.Webhooks[i].ClientConfig.CABundle)
			}
			return out
		}))
	}
	for _, name := range m.ValidatingWebhooks {
		c := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		errs = append(errs, m.patchBundle(ctx, "validatingwebhookconfiguration", name, c, bundle, func() (out []*[]byte) {
			for i := range c.Webhooks {
				out = append(out, &c.Webhooks[i].ClientConfig.CABundle)
			}
			return out
		}))
	}
	return errors.Join(errs...)
}

// patchBundle gets the webhook configuration name into obj, sets the CA
// bundle of each of its webhooks (bundles points at them, once obj is
// read) and updates it when anything changed.
func (m *CertManager) patchBundle(ctx context.Context, kind, name string, obj client.Object, bundle []byte, bundles func() []*[]byte) error {
	if err := m.Client.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
		return fmt.Errorf("get %s %s: %w", kind, name, err)
	}
	changed := false
	for _, b := range bundles() {
		if !bytes.Equal(*b, bundle) {
			*b = bundle
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := m.Client.Update(ctx, obj); err != nil {
		return fmt.Errorf("update %s %s: %w", kind, name, err)
	}
	return nil
}

func sameHosts(c *x509.Certificate, hosts []string) bool {
	var dns, ips []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip.String())
		} else {
			dns = append(dns, h)
		}
	}
	var cips []string
	for _, ip := range c.IPAddresses {
		cips = append(cips, ip.String())
	}
	slices.Sort(dns)
	slices.Sort(ips)
	cdns := slices.Sorted(slices.Values(c.DNSNames))
	slices.Sort(cips)
	return slices.Equal(dns, cdns) && slices.Equal(ips, cips)
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	c, err := parseCert(certPEM)
	if err != nil {
		return nil, nil, err
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, nil, errors.New("no key")
	}
	k, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if !k.PublicKey.Equal(c.PublicKey) {
		return nil, nil, errors.New("key does not match certificate")
	}
	return c, k, nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encode(der []byte, k *ecdsa.PrivateKey) ([]byte, []byte, error) {
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

func newCA(now time.Time) ([]byte, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "egret-webhook-ca", Organization: []string{"egret"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		return nil, nil, fmt.Errorf("create webhook ca: %w", err)
	}
	return encode(der, k)
}

func newServing(now time.Time, ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string) ([]byte, []byte, error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("serving certificate: no host names")
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tpl.IPAddresses = append(tpl.IPAddresses, ip)
		} else {
			tpl.DNSNames = append(tpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("create webhook serving certificate: %w", err)
	}
	return encode(der, k)
}

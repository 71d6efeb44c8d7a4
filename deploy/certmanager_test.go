package deploy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
	"egret.io/egret/internal/testutil/secretvol"
	"egret.io/egret/internal/webhook"
)

// testCA issues certificates as cert-manager's CA Issuer does: the key
// pair of a CA Certificate signs each serving certificate, and the Secret
// it writes holds tls.crt, tls.key and ca.crt (the CA).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns the Secret data of a serving certificate for names (and
// 127.0.0.1, where the test's API server calls the webhook), with a new
// key, as rotationPolicy: Always renews.
func (ca *testCA) issue(t *testing.T, names []string) (map[string]string, *big.Int) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial := big.NewInt(time.Now().UnixNano())
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"tls.crt": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		"tls.key": string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})),
		"ca.crt":  string(ca.pem),
	}, serial
}

// TestCertManagerChain: certManager.enabled renders the chain cert-manager's
// users build — selfSigned Issuer → CA Certificate → CA Issuer → serving
// Certificate — with cainjector reading the serving Certificate, whose
// ca.crt is the CA. Then, against the real API server, the test does what
// cert-manager's controller and cainjector would (they are not run here:
// their controller binaries are not published as Go modules, see the
// report in docs/kubernetes.md's Tests): it writes the CA and the serving
// certificate into the rendered Secrets, the CA into the caBundle, runs the
// webhook binary with the rendered args on the mounted Secret, renews the
// serving certificate (new key, same CA) and checks the API server keeps
// calling the webhook with the caBundle unchanged; a self-signed renewal
// (what the chart did before) breaks the calls until the bundle changes.
func TestCertManagerChain(t *testing.T) {
	const release = "cm"
	objs := helmTemplateValues(t, release, "cm-egret", "certManager: {enabled: true}")
	get := func(kind, name string) *unstructured.Unstructured {
		t.Helper()
		o := find(objs, kind, name)
		if o == nil {
			t.Fatalf("no %s %s rendered", kind, name)
		}
		return o
	}
	str := func(o *unstructured.Unstructured, path ...string) string {
		v, _, _ := unstructured.NestedFieldNoCopy(o.Object, path...)
		return fmt.Sprint(v)
	}
	if str(get("Issuer", "cm-egret-selfsigned"), "spec", "selfSigned") != "map[]" {
		t.Error("no selfSigned Issuer")
	}
	ca := get("Certificate", "cm-egret-ca")
	if str(ca, "spec", "isCA") != "true" || str(ca, "spec", "secretName") != "cm-egret-ca" || str(ca, "spec", "issuerRef", "name") != "cm-egret-selfsigned" {
		t.Errorf("CA Certificate %v", ca.Object["spec"])
	}
	if str(get("Issuer", "cm-egret-ca"), "spec", "ca", "secretName") != "cm-egret-ca" {
		t.Error("the CA Issuer does not sign with the CA Certificate's Secret")
	}
	serving := get("Certificate", "cm-egret-webhook")
	if str(serving, "spec", "issuerRef", "name") != "cm-egret-ca" || str(serving, "spec", "issuerRef", "kind") != "Issuer" ||
		str(serving, "spec", "privateKey", "rotationPolicy") != "Always" || str(serving, "spec", "secretName") != "cm-egret-webhook-cert" {
		t.Errorf("serving Certificate %v", serving.Object["spec"])
	}
	dns, _, _ := unstructured.NestedStringSlice(serving.Object, "spec", "dnsNames")
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		if a := get(kind, "cm-egret").GetAnnotations()["cert-manager.io/inject-ca-from"]; a != "cm-egret/cm-egret-webhook" {
			t.Errorf("%s inject-ca-from %q, want the serving Certificate", kind, a)
		}
	}
	ps := podSpec(t, objs, "cm-egret-webhook")
	if v := ps.Volumes[slices.IndexFunc(ps.Volumes, func(v corev1.Volume) bool { return v.Name == "tls" })]; v.Secret.SecretName != "cm-egret-webhook-cert" {
		t.Errorf("the webhook mounts %s, not the serving certificate's Secret", v.Secret.SecretName)
	}

	kc := kubetest.Require(t)
	bin := testutil.BuildEgret(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := thirdPartyCRDs(t, kc)
	ns := "cm-egret"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The webhook configurations call the loopback port the binary
	// listens on, as TestShippedInstall's do.
	port := loopbackPort(t)
	var hooks []*unstructured.Unstructured
	for i, o := range objs {
		if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
			o = o.DeepCopy()
			ws, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, w := range ws {
				cc := w.(map[string]any)["clientConfig"].(map[string]any)
				cc["url"] = fmt.Sprintf("https://127.0.0.1:%d%s", port, cc["service"].(map[string]any)["path"])
				delete(cc, "service")
			}
			_ = unstructured.SetNestedSlice(o.Object, ws, "webhooks")
			objs[i] = o
			hooks = append(hooks, o)
		}
	}
	applyRelease(t, c, objs)

	// cert-manager: the CA Certificate's Secret, then the serving one.
	setSecret := func(name string, data map[string]string) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS, StringData: data}
		if err := c.Create(ctx, s); apierrors.IsAlreadyExists(err) {
			err = c.Update(ctx, s)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	authority := newTestCA(t, "cm-egret-webhook-ca")
	setSecret("cm-egret-ca", map[string]string{"tls.crt": string(authority.pem), "ca.crt": string(authority.pem), "tls.key": "unused"})
	first, serial1 := authority.issue(t, dns)
	setSecret("cm-egret-webhook-cert", first)
	// cainjector: the serving Certificate's ca.crt into every caBundle.
	inject := func(bundle []byte) {
		t.Helper()
		for _, h := range hooks {
			got := h.DeepCopy()
			if err := c.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
				t.Fatal(err)
			}
			ws, _, _ := unstructured.NestedSlice(got.Object, "webhooks")
			for _, w := range ws {
				w.(map[string]any)["clientConfig"].(map[string]any)["caBundle"] = base64.StdEncoding.EncodeToString(bundle)
			}
			_ = unstructured.SetNestedSlice(got.Object, ws, "webhooks")
			if err := c.Update(ctx, got); err != nil {
				t.Fatal(err)
			}
		}
	}
	inject([]byte(first["ca.crt"]))
	bundles := func() []string {
		var out []string
		for _, h := range hooks {
			got := h.DeepCopy()
			if err := c.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
				t.Fatal(err)
			}
			ws, _, _ := unstructured.NestedSlice(got.Object, "webhooks")
			for _, w := range ws {
				b, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "caBundle")
				out = append(out, b)
			}
		}
		return out
	}
	before := bundles()

	// The kubelet: the Secret mounted at the webhook's /tls.
	vol := secretvol.New(t, first)
	wc := ps.Containers[0]
	args, env := podArgs(wc, ns)
	args = substitute(t, args, map[string]string{
		"--listen":         fmt.Sprintf("127.0.0.1:%d", port),
		"--metrics-listen": fmt.Sprintf("127.0.0.1:%d", loopbackPort(t)),
		"--cert-dir":       vol.Dir,
	})
	args = append(args, "--kubeconfig="+saKubeconfig(t, kc, ns, "cm-egret-webhook"))
	// The webhook process, restartable: the API server keeps its TLS
	// connections to a webhook, so only new ones (a new replica, a dropped
	// connection) verify a renewed certificate; a restart makes the next
	// call a new handshake.
	var out *testutil.SyncBuffer
	var stop func()
	start := func() {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out = &testutil.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop = func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
	}
	ready := func() {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				return false, nil
			}
			conn.Close()
			hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
			resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", port))
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == 200, nil
		})
		if err != nil {
			t.Fatalf("the webhook never served /readyz: %v\n%s", err, out.String())
		}
	}
	restart := func() { stop(); start(); ready() }
	start()
	t.Cleanup(func() { stop() })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(authority.pem)
	served := func(roots *x509.CertPool) *big.Int {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: roots, InsecureSkipVerify: roots == nil})
		if err != nil {
			return nil
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	ready()
	if s := served(pool); s == nil || s.Cmp(serial1) != 0 {
		t.Fatalf("the webhook does not serve cert-manager's certificate, verified by its CA: %v\n%s", s, out.String())
	}
	app := kc.Namespace(t, "cm-app", nil)
	n := 0
	injected := func() bool {
		t.Helper()
		n++
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: fmt.Sprintf("p%d", n), Labels: map[string]string{webhook.InjectAnnotation: "true"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatalf("create pod: %v", err)
		}
		return slices.ContainsFunc(p.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "HTTPS_PROXY" })
	}
	if !injected() {
		t.Fatalf("the API server does not call the webhook through the injected caBundle:\n%s", out.String())
	}

	// Renewal: a new key and certificate from the same CA. cert-manager
	// updates the Secret, the kubelet the volume; cainjector has nothing
	// to change.
	second, serial2 := authority.issue(t, dns)
	setSecret("cm-egret-webhook-cert", second)
	vol.Update(t, second)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		s := served(pool)
		return s != nil && s.Cmp(serial2) == 0, nil
	})
	if err != nil {
		t.Fatalf("the webhook did not take up the renewed certificate: %v\n%s", err, out.String())
	}
	if after := bundles(); !slices.Equal(before, after) {
		t.Error("the caBundle changed across the renewal")
	}
	restart()
	if !injected() {
		t.Errorf("after the renewal the API server no longer reaches the webhook:\n%s", out.String())
	}

	// What a self-signed serving certificate did at each renewal: a new
	// CA the caBundle does not hold. The API server's calls fail (this
	// hook ignores failures: the pod is created, without egret; in an
	// opted-in namespace, failurePolicy Fail refuses it) until cainjector
	// writes the new bundle.
	other := newTestCA(t, "a self-signed renewal")
	third, serial3 := other.issue(t, dns)
	vol.Update(t, third)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		s := served(nil)
		return s != nil && s.Cmp(serial3) == 0, nil
	})
	if err != nil {
		t.Fatalf("the webhook did not take up the third certificate: %v", err)
	}
	restart()
	if injected() {
		t.Error("the API server called the webhook through a caBundle that does not hold its CA: the check proves nothing")
	}
}

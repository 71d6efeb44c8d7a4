package policy_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/policy"
)

// TestSecretGrantRBAC applies the Role and RoleBinding of
// docs/interception.md and runs the gateway's Secret reader (Secrets) as
// the gateway's service account: the granted Secret is listed and watched
// by name and its credential loads; another Secret of the namespace,
// granted in the configuration but not by the Role, never loads, and the
// service account can neither read it nor list the namespace's Secrets.
func TestSecretGrantRBAC(t *testing.T) {
	c := requireCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	shop := c.Namespace(t, "icpt-rbac", nil)
	b, err := os.ReadFile("../../docs/interception.md")
	if err != nil {
		t.Fatal(err)
	}
	const mark = "kind: Role\nmetadata: {name: egret-gateway-credentials, namespace: shop}"
	i := strings.Index(string(b), mark)
	if i < 0 {
		t.Fatal("docs/interception.md: the RBAC example is gone")
	}
	start := strings.LastIndex(string(b[:i]), "```yaml\n") + len("```yaml\n")
	block := string(b[start:])
	block = block[:strings.Index(block, "```")]
	block = strings.ReplaceAll(block, "namespace: shop}", "namespace: "+shop+"}")
	docs := strings.Split(block, "\n---\n")
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &role); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &binding); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clientset.RbacV1().Roles(shop).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clientset.RbacV1().RoleBindings(shop).Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"openai": "sk-rbac-granted", "other": "sk-rbac-not-granted"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: shop, Name: name}, Data: map[string][]byte{"token": []byte(tok)}}
		if _, err := c.Clientset.CoreV1().Secrets(shop).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:egret-system:egret-gateway",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:egret-system", "system:authenticated"}}
	gw := kubernetes.NewForConfigOrDie(cfg)
	eventually(t, 10*time.Second, "the Role in force", func() bool {
		_, err := gw.CoreV1().Secrets(shop).Get(ctx, "openai", metav1.GetOptions{})
		return err == nil
	})
	if _, err := gw.CoreV1().Secrets(shop).Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the gateway read a Secret its Role does not name: %v", err)
	}
	if _, err := gw.CoreV1().Secrets(shop).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the gateway listed the namespace's Secrets: %v", err)
	}

	store := &policy.Secrets{Client: gw, Context: ctx, Grants: func() []string { return []string{shop + "/openai", shop + "/other"} }}
	granted, err := store.Credential(intercept.CredentialSpec{Name: shop + "/openai", Files: []string{"Secret " + shop + "/openai key token"}}, shop, "openai", []string{"token"})
	if err != nil {
		t.Fatal(err)
	}
	denied, err := store.Credential(intercept.CredentialSpec{Name: shop + "/other", Files: []string{"Secret " + shop + "/other key token"}}, shop, "other", []string{"token"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the granted Secret loaded through its list and watch by name", granted.Loaded)
	time.Sleep(time.Second)
	if denied.Loaded() {
		t.Error("a Secret the Role does not name was loaded")
	}
}

// TestSecretsHoldOnlyLiveCredentials: credentials that no compiled policy
// holds any more (a tenant editing header names over and over) are not
// kept by the gateway's Secret reader; one still held is, and keeps
// following its Secret.
func TestSecretsHoldOnlyLiveCredentials(t *testing.T) {
	c := requireCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns := c.Namespace(t, "icpt-held", nil)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "k"}, Data: map[string][]byte{"token": []byte("v1")}}
	if _, err := c.Clientset.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	store := &policy.Secrets{Client: c.Clientset, Context: ctx, Grants: func() []string { return []string{ns + "/k"} }}
	mk := func(header string) *intercept.Credential {
		cr, err := store.Credential(intercept.CredentialSpec{Name: ns + "/k", Scheme: "raw", Header: header, Files: []string{"Secret " + ns + "/k key token"}}, ns, "k", []string{"token"})
		if err != nil {
			t.Fatal(err)
		}
		return cr
	}
	live := mk("x-live")
	for i := range 200 {
		mk(fmt.Sprintf("x-edit-%d", i))
	}
	if again := mk("x-live"); again != live {
		t.Error("an equal spec got a second credential")
	}
	eventually(t, 10*time.Second, "the dropped credentials collected", func() bool {
		runtime.GC()
		return policy.SecretsHeld(store) == 1
	})
	s.Data["token"] = []byte("v2")
	if _, err := c.Clientset.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the live credential follows its Secret", func() bool {
		h := http.Header{}
		return live.Apply(h) == nil && h.Get("X-Live") == "v2"
	})
}

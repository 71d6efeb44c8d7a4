package trust

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"egret.io/egret/internal/testutil/tlslab"
)

// TestRuntimesForReal checks every row marked VerifiedReal with the real
// runtime, in a private mount namespace whose "system roots" are a test CA
// (so an origin signed by it stands for a public site):
//
//   - defaults: the corporate origin fails, the public one works;
//   - egret's settings (InjectedEnv, JavaProperties, the bundle Build
//     makes): both work, and an origin signed by an untrusted CA fails;
//   - the runtime's own first setting pointing at the corporate CA alone:
//     the corporate origin works, and the public one fails exactly when the
//     model says nothing of the defaults survives (Setting.KeepsDefaults:
//     the sandbox's /etc/ssl/certs is laid out as Debian's, hash links
//     included);
//   - a bundle swapped as the kubelet swaps a ConfigMap volume: the same
//     process trusts the new CA exactly when the model says it re-reads.
func TestRuntimesForReal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real runtimes")
	}
	lab := tlslab.New(t)
	public := tlslab.NewCA(t, "Test Public Root")
	corp := tlslab.NewCA(t, "Corp TLS Inspection CA")
	rogue := tlslab.NewCA(t, "Rogue CA")
	lab.SystemRoots = []*tlslab.CA{public}
	lab.Hosts = map[string]string{"corp.example.test": "127.0.0.1", "www.example.com": "127.0.0.1", "shop.example.net": "127.0.0.1"}
	corpURL := fmt.Sprintf("https://corp.example.test:%d/", tlslab.Origin(t, "127.0.0.1", corp, "corp.example.test"))
	publicURL := fmt.Sprintf("https://www.example.com:%d/", tlslab.Origin(t, "127.0.0.1", public, "www.example.com"))
	rogueURL := fmt.Sprintf("https://shop.example.net:%d/", tlslab.Origin(t, "127.0.0.1", rogue, "shop.example.net"))

	files := func(system, source []*x509.Certificate) map[string][]byte {
		b, err := Build(system, source)
		if err != nil {
			t.Fatal(err)
		}
		p12, err := b.TrustStore(nil)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{BundleFile: b.PEM(), TrustStoreFile: p12}
	}
	egret := tlslab.NewVolume(t)
	egret.Write(t, files([]*x509.Certificate{public.Cert}, []*x509.Certificate{corp.Cert}))
	// The corporate CA alone, as a PEM file and as a store.
	alone := t.TempDir()
	if err := os.WriteFile(filepath.Join(alone, BundleFile), corp.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	p12, err := (&Bundle{Certs: []*x509.Certificate{corp.Cert}}).TrustStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(alone, TrustStoreFile), p12, 0o644); err != nil {
		t.Fatal(err)
	}

	envOf := func(e Env) []string {
		var out []string
		for k, v := range e {
			out = append(out, k+"="+v)
		}
		return out
	}
	// ownSetting points r's first setting at dir's files.
	ownSetting := func(r Runtime, dir string) []string {
		s := r.Settings[0]
		if s.Kind == JavaProperty {
			return []string{"JAVA_TOOL_OPTIONS=-D" + s.Name + "=" + filepath.Join(dir, TrustStoreFile) +
				" -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=" + TrustStorePassword}
		}
		return []string{s.Name + "=" + filepath.Join(dir, BundleFile)}
	}

	tested := map[string]bool{}
	for _, c := range tlslab.Clients() {
		r, ok := RuntimeByName(c.Name)
		if !ok {
			t.Fatalf("the lab runs %s, which the model lacks", c.Name)
		}
		tested[c.Name] = true
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			lab.Need(t, c)
			// Node carries its own roots: the test's system roots are not
			// among them, so the public origin cannot stand for one there.
			ownRoots := c.Name == "node"
			expect := func(what, url string, env []string, want bool) {
				t.Helper()
				got := lab.Run(t, c, url, env)
				switch {
				case got.OK != want:
					t.Errorf("%s: %s %s: got %q, want ok=%v", c.Name, what, url, got, want)
				case !got.OK && !got.TrustFailure():
					t.Errorf("%s: %s %s failed, but not on the certificate: %q", c.Name, what, url, got)
				}
			}
			t.Run("defaults", func(t *testing.T) {
				expect("no CA setting", corpURL, nil, false)
				if !ownRoots {
					expect("no CA setting", publicURL, nil, true)
				}
			})
			t.Run("egret-injected", func(t *testing.T) {
				env := envOf(InjectedEnvMap(egret.Dir))
				expect("egret's settings", corpURL, env, true)
				if !ownRoots {
					expect("egret's settings", publicURL, env, true)
				}
				expect("egret's settings", rogueURL, env, false)
			})
			t.Run("corporate-ca-alone", func(t *testing.T) {
				env := ownSetting(r, alone)
				expect(r.Settings[0].String()+" with the corporate CA alone", corpURL, env, true)
				if !ownRoots {
					expect(r.Settings[0].String()+" with the corporate CA alone", publicURL, env, r.Settings[0].KeepsDefaults())
				}
			})
			t.Run("bundle-swapped", func(t *testing.T) {
				vol := tlslab.NewVolume(t)
				vol.Write(t, files([]*x509.Certificate{public.Cert}, []*x509.Certificate{rogue.Cert}))
				first, second := lab.RunTwice(t, c, corpURL, ownSetting(r, vol.Dir), func() {
					vol.Write(t, files([]*x509.Certificate{public.Cert}, []*x509.Certificate{corp.Cert}))
				})
				if first.OK || !first.TrustFailure() {
					t.Fatalf("before the corporate CA was in the bundle: %s", first)
				}
				if want := !r.Reread.NeedsRestart(); second.OK != want {
					t.Errorf("%s after the bundle changed: got %q, want ok=%v (model: %s)", c.Name, second, want, r.Reread)
				}
			})
		})
	}
	for _, r := range Runtimes() {
		if r.Verified == VerifiedReal && !tested[r.Name] {
			t.Errorf("%s is marked real but the lab does not run it", r.Name)
		}
		if r.Verified != VerifiedReal && tested[r.Name] {
			t.Errorf("%s is run by the lab but marked %s", r.Name, r.Verified)
		}
	}
}

package proxyd

import (
	"context"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/tlslab"
	"egret.io/egret/internal/trust"
)

// TestRunVerifiesTrustBundle: the sidecar checks the CA bundle the webhook
// mounted against the digest it verified at admission (issue 21, finding
// 9), and refuses to start on another one — a ConfigMap egret did not
// write — before opening any listener.
func TestRunVerifiesTrustBundle(t *testing.T) {
	system, corp, tenant := tlslab.NewCA(t, "Public Root"), tlslab.NewCA(t, "Corp CA"), tlslab.NewCA(t, "Tenant Intercept CA")
	bundleDir := func(t *testing.T, cas ...*tlslab.CA) (string, string) {
		t.Helper()
		var certs []*x509.Certificate
		for _, ca := range cas {
			certs = append(certs, ca.Cert)
		}
		b, err := trust.Build(certs[:1], certs[1:])
		if err != nil {
			t.Fatal(err)
		}
		p12, err := b.TrustStore(nil)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for name, data := range map[string][]byte{trust.BundleFile: b.PEM(), trust.TrustStoreFile: p12} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o444); err != nil {
				t.Fatal(err)
			}
		}
		return dir, b.Digest()
	}
	egrets, digest := bundleDir(t, system, corp)
	squatted, _ := bundleDir(t, system, tenant)
	run := func(t *testing.T, dir string) (bool, string, error) {
		t.Helper()
		env := map[string]string{"LISTEN_ADDR": "127.0.0.1:0", "ADMIN_LISTEN_ADDR": "127.0.0.1:0", "EGRET_DNS_SERVERS": "127.0.0.1:1",
			"EGRET_DRAIN_PERIOD": "0s", "EGRET_DRAIN_TIMEOUT": "1s", "EGRET_TRUST_DIR": dir, "EGRET_TRUST_DIGEST": digest}
		cfg, err := config.Load(config.Sources{Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		if err != nil {
			t.Fatal(err)
		}
		logs := &testutil.SyncBuffer{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := make(chan Addrs, 1)
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, cfg, Options{Version: "test", AccessLog: logs, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
				Started: func(a Addrs) { started <- a }})
		}()
		select {
		case <-started:
			cancel()
			return true, logs.String(), <-done
		case err := <-done:
			return false, logs.String(), err
		case <-time.After(20 * time.Second):
			t.Fatal("Run neither started nor failed")
		}
		return false, "", nil
	}
	t.Run("egrets-bundle-starts", func(t *testing.T) {
		ok, logs, err := run(t, egrets)
		if !ok || err != nil {
			t.Fatalf("started %v, err %v", ok, err)
		}
		if !strings.Contains(logs, `"msg":"trust bundle verified"`) {
			t.Errorf("no verification logged:\n%s", logs)
		}
	})
	t.Run("squatted-bundle-refused", func(t *testing.T) {
		ok, _, err := run(t, squatted)
		if ok || err == nil || !strings.Contains(err.Error(), "not "+digest[:12]) {
			t.Fatalf("started %v, err %v", ok, err)
		}
	})
	t.Run("missing-bundle-refused", func(t *testing.T) {
		ok, _, err := run(t, t.TempDir())
		if ok || err == nil || !strings.Contains(err.Error(), "is not mounted") {
			t.Fatalf("started %v, err %v", ok, err)
		}
	})
}

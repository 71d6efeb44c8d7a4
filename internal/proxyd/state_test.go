package proxyd

import (
	"crypto/x509"
	"testing"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/route"
)

// TestPoolTLSWithoutToken: a pool's own TLS settings (its CA, its server
// name) reach the pool whether or not a sidecar token is configured.
func TestPoolTLSWithoutToken(t *testing.T) {
	for _, token := range []string{"", "/var/run/token"} {
		cfg := &config.Proxy{Default: route.Direct, Pools: map[string]config.Pool{
			"corp": {RootCAs: x509.NewCertPool(), ServerName: "proxy.corp.test"},
		}}
		cfg.Credentials.TokenFile = token
		st, err := BuildState(cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := st.Pools["corp"]
		if p.TLSConfig == nil || p.TLSConfig.RootCAs == nil || p.TLSConfig.ServerName != "proxy.corp.test" {
			t.Errorf("token file %q: pool TLS config %+v, want the pool's CA and server name", token, p.TLSConfig)
		}
	}
}

package config

import (
	"strings"
	"testing"
)

func loadYAML(yaml string) (*Proxy, error) {
	read := func(string) ([]byte, error) { return []byte(yaml), nil }
	return Load(Sources{File: "egret.yaml", ReadFile: read, Env: env()})
}

// TestInterceptConfig maps the file's interception section to the
// engine's SiteSpec, and refuses what cannot work with a one-line error
// that names the fix.
func TestInterceptConfig(t *testing.T) {
	p, err := loadYAML(`
role: gateway
intercept:
  ca_dir: /ca
  origin_ca_file: /origin-ca.crt
  sites:
    - hosts: [api.example.test, "*.models.example.test"]
      exempt: [pinned.models.example.test]
      credentials:
        - {name: team-a/api, header: x-api-key, scheme: raw, dir: /secrets/api}
        - {name: team-a/basic, scheme: basic, files: [/u, /p]}
      http:
        mode: report
        rules:
          - {action: deny, methods: [DELETE], path_prefixes: [/v1]}
`)
	if err != nil {
		t.Fatal(err)
	}
	ic := p.Intercept
	if ic == nil || ic.CADir != "/ca" || ic.OriginCAFile != "/origin-ca.crt" || len(ic.Sites) != 1 {
		t.Fatalf("intercept %+v", ic)
	}
	s := ic.Sites[0]
	if len(s.Hosts) != 2 || s.Exempt[0] != "pinned.models.example.test" || s.Credentials[0].Files[0] != "/secrets/api/token" ||
		s.Credentials[1].Files[1] != "/p" || s.HTTP.Mode != "report" || s.HTTP.Rules[0].PathPrefixes[0] != "/v1" {
		t.Errorf("site %+v", s)
	}

	p, err = loadYAML("role: gateway\n")
	if err != nil || p.Intercept != nil {
		t.Fatalf("no section: %v %+v", err, p.Intercept)
	}

	// Sites from the policies only: the Secrets their credentials may name.
	p, err = loadYAML("role: gateway\nintercept:\n  ca_dir: /ca\n  secrets: [shop/openai, egret-system/vendor.key]\n")
	if err != nil || p.Intercept == nil || len(p.Intercept.Sites) != 0 || len(p.Intercept.Secrets) != 2 || p.Intercept.Secrets[1] != "egret-system/vendor.key" {
		t.Fatalf("secrets only: %v %+v", err, p.Intercept)
	}

	for _, tc := range []struct{ yaml, want string }{
		{"intercept:\n  ca_dir: /ca\n  sites: [{hosts: [a.test]}]\n", "the sidecar never terminates TLS: move the intercept section to the egress gateway"},
		{"role: gateway\nintercept:\n  sites: [{hosts: [a.test]}]\n", "interception needs ca_dir"},
		{"role: gateway\nintercept:\n  ca_dir: /ca\n", "interception needs at least one site"},
		{"role: gateway\nintercept:\n  ca_dir: /ca\n  secrets: [openai]\n", "intercept.secrets[0]"},
		{"role: gateway\nintercept:\n  ca_dir: /ca\n  secrets: [shop/Open_AI]\n", "a Secret is namespace/name"},
		{"role: gateway\nintercept:\n  ca_dir: /ca\n  secrets: [shop/openai]\n  publish_configmap: egret-intercept-ca\n", "intercept.publish_configmap"},
		{"role: gateway\nintercept:\n  ca_dir: /ca\n  sites: [{hosts: []}]\n", "needs at least one host"},
		{"role: gateway\nintercept:\n  ca_dir: /ca\n  sites: [{hosts: [a.test], credentials: [{name: k, scheme: raw, dir: /d}]}]\n", "a raw credential needs a header name"},
		{"role: gateway\nintercept:\n  ca_dir: /ca\n  sites: [{hosts: [a.test], credentials: [{name: k, dir: /d, files: [/f]}]}]\n", "give dir or files, not both"},
		{"role: gateway\nintercept:\n  ca_dir: /ca\n  sites: [{hosts: [a.test], http: {rules: [{action: maybe}]}}]\n", "action"},
		{"role: gateway\nintercept:\n  ca_dir: /ca\n  sites: [{hosts: [a.test], http: {rules: [{action: deny, pathPrefixes: [/x]}]}}]\n", "path_prefixes"},
	} {
		_, err := loadYAML(tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.want)
			continue
		}
		if strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%q: not one line: %q", tc.yaml, err)
		}
	}
}

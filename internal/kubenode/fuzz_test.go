package kubenode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzRenderRoundTrip: whatever proxy URL and NO_PROXY entry Render accepts
// must read back unchanged through the systemd parsers (no quoting hole lets
// a value escape its assignment).
func FuzzRenderRoundTrip(f *testing.F) {
	for _, tc := range renderCases {
		np := ""
		if len(tc.opts.NoProxy) > 0 {
			np = tc.opts.NoProxy[0]
		}
		f.Add(tc.opts.Proxy, np)
	}
	f.Add(`http://proxy:3128/"x`, `a\b`)
	f.Add(`http://u:it's@proxy:1`, "%n")
	f.Add("http://proxy:1/%n%%", ".svc")
	f.Fuzz(func(t *testing.T, proxy, entry string) {
		r, err := Render(RenderOptions{Runtime: Containerd, Proxy: proxy, NoProxy: []string{entry}})
		if err != nil {
			return
		}
		dir := t.TempDir()
		content := r.DropIn.Content
		if r.EnvFile != nil {
			envPath := filepath.Join(dir, "env")
			content = strings.ReplaceAll(content, r.EnvFile.Path, envPath)
			if err := os.WriteFile(envPath, []byte(r.EnvFile.Content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, r.Unit+".d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, r.Unit+".d", DropInName), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		ue, err := LoadUnitEnv(r.Unit, []string{dir})
		if err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSpace(proxy)
		if ue.Env["HTTPS_PROXY"] != want || ue.Env["http_proxy"] != want || ue.Env["NO_PROXY"] != r.NoProxy {
			t.Fatalf("round trip of %q / %q: got %v\n%s", proxy, entry, ue.Env, content)
		}
		if len(ue.Env) != 6 {
			t.Fatalf("round trip of %q made %d variables: %v", proxy, len(ue.Env), ue.Env)
		}
	})
}

// FuzzUnitFile feeds arbitrary unit files and environment files to the
// parsers: no panic, and every variable name is non-empty.
func FuzzUnitFile(f *testing.F) {
	f.Add("[Service]\nEnvironment=\"A=1\" B='2 3' C=\\x41\nEnvironmentFile=-ENV\n", "A='x'\nB=\"y\\\"z\"\n# c\n")
	f.Add("[Service]\nEnvironment=A=1 \\\n B=2\n[Install]\nEnvironment=X=1\n", "X")
	f.Fuzz(func(t *testing.T, unit, env string) {
		dir := t.TempDir()
		envPath := filepath.Join(dir, "env")
		if err := os.WriteFile(envPath, []byte(env), 0o600); err != nil {
			t.Fatal(err)
		}
		unit = strings.ReplaceAll(unit, "ENV", envPath)
		if err := os.WriteFile(filepath.Join(dir, "x.service"), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		ue, err := LoadUnitEnv("x.service", []string{dir})
		if err != nil {
			return
		}
		for k := range ue.Env {
			if k == "" {
				t.Fatalf("empty variable name from %q", unit)
			}
		}
	})
}

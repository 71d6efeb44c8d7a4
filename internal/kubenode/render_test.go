package kubenode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	goldenfile "egret.io/egret/internal/testutil/golden"
)

var renderCases = []struct {
	name string
	opts RenderOptions
}{
	{"containerd", RenderOptions{Runtime: Containerd, Proxy: "http://proxy.corp.example:3128",
		NoProxy: []string{".corp.example,10.0.0.0/8"}, Registries: []string{"registry.internal:5000", "harbor.corp.example"}}},
	{"crio", RenderOptions{Runtime: CRIO, Proxy: "http://proxy.corp.example:3128",
		Registries: []string{"https://quay.internal/v2/", "[fd00::5]:5000", "10.1.2.3:5000"}}},
	{"docker-credentials", RenderOptions{Runtime: Docker, Proxy: "http://node-pull:p%40ss%25w0rd@proxy.corp.example:3128",
		NoProxy: []string{".svc", ".cluster.local"}, Registries: []string{"registry.internal"}}},
	// docs/node.md's kubelet example (the API server's address first: the
	// kubelet's one destination), plus a spelling of localhost to fold.
	{"kubelet", RenderOptions{Runtime: Kubelet, Proxy: "http://proxy.corp.example:3128",
		NoProxy: []string{"10.88.0.1,10.88.0.0/16", "10.96.0.0/16", "LOCALHOST"}}},
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range renderCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Render(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			b.WriteString("# " + r.DropIn.Path + "\n" + r.DropIn.Content)
			if r.EnvFile != nil {
				b.WriteString("# " + r.EnvFile.Path + " (mode 0600)\n" + r.EnvFile.Content)
				if r.EnvFile.Mode != 0o600 || !r.EnvFile.Secret {
					t.Errorf("env file mode %o secret %v", r.EnvFile.Mode, r.EnvFile.Secret)
				}
				if strings.Contains(r.DropIn.Content, "p%40ss") {
					t.Error("the drop-in holds the password")
				}
			}
			b.WriteString("# steps: " + strings.Join(r.Steps, " && ") + "\n")
			golden(t, "render-"+tc.name+".golden", []byte(b.String()))
		})
	}
}

// TestRenderRoundTrip writes each rendered drop-in into a unit directory and
// reads it back with the systemd parser Inspect uses: the variables must come
// back exactly as rendered (quoting, %% and the env file included).
func TestRenderRoundTrip(t *testing.T) {
	for _, tc := range renderCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Render(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			dropIn := filepath.Join(dir, r.Unit+".d", DropInName)
			content := r.DropIn.Content
			if r.EnvFile != nil {
				envPath := filepath.Join(dir, r.Unit+".d", EnvFileName)
				content = strings.ReplaceAll(content, r.EnvFile.Path, envPath)
				mustWrite(t, envPath, r.EnvFile.Content)
			}
			mustWrite(t, dropIn, content)
			ue, err := LoadUnitEnv(r.Unit, []string{dir})
			if err != nil {
				t.Fatal(err)
			}
			p := tc.opts.Proxy
			want := map[string]string{
				"HTTP_PROXY": p, "http_proxy": p, "HTTPS_PROXY": p, "https_proxy": p,
				"NO_PROXY": r.NoProxy, "no_proxy": r.NoProxy,
			}
			for k, v := range want {
				if ue.Env[k] != v {
					t.Errorf("%s read back as %q, want %q", k, ue.Env[k], v)
				}
			}
			if len(ue.Env) != len(want) {
				t.Errorf("read back %d variables, want %d: %v", len(ue.Env), len(want), ue.Env)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts RenderOptions
		want string
	}{
		{"no-proxy-url", RenderOptions{Runtime: Containerd}, "required"},
		{"unknown-runtime", RenderOptions{Runtime: "podman", Proxy: "http://p:1"}, "unknown runtime"},
		{"no-scheme", RenderOptions{Runtime: Containerd, Proxy: "proxy:3128"}, "no scheme"},
		{"bad-scheme", RenderOptions{Runtime: Containerd, Proxy: "ftp://proxy:21"}, "unsupported scheme"},
		{"unencoded-password", RenderOptions{Runtime: Containerd, Proxy: "http://u:p@ss w@proxy:3128"}, "percent-encoded"},
		{"newline", RenderOptions{Runtime: Containerd, Proxy: "http://proxy:3128\nEnvironment=X=1"}, "line break"},
		{"entry-with-quote", RenderOptions{Runtime: Containerd, Proxy: "http://p:1", NoProxy: []string{`a"b`}}, "quote"},
		{"bad-registry", RenderOptions{Runtime: Containerd, Proxy: "http://p:1", Registries: []string{"user@host"}}, "not a host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "p@ss") {
				t.Errorf("error leaks the password: %v", err)
			}
		})
	}
}

func TestQuoting(t *testing.T) {
	for _, tc := range []struct{ name, in, file string }{
		{"plain", "A=http://p:1", `'A=http://p:1'`},
		{"percent", "A=p%40ss", `'A=p%40ss'`},
		{"quote-and-backslash", `A=a"b\c`, `'A=a"b\c'`},
		{"single-quote", "A=it's", `"A=it's"`},
		{"dollar-in-double", "A=x'$y", `"A=x'\$y"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := quoteEnvFile(tc.in); got != tc.file {
				t.Errorf("quoteEnvFile = %s, want %s", got, tc.file)
			}
		})
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

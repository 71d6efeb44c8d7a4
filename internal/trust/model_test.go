package trust

import (
	"path"
	"strings"
	"testing"
)

// TestInjectionReachesEveryRuntime ties the injected settings to the
// model: with what the webhook injects, every modelled runtime reads
// egret's bundle (the PEM file, or the PKCS#12 store for the JVM).
func TestInjectionReachesEveryRuntime(t *testing.T) {
	dir := "/etc/egret/trust"
	env := InjectedEnvMap(dir)
	for _, r := range Runtimes() {
		c := Resolve(r, env)
		want := path.Join(dir, BundleFile)
		if r.Name == "java" {
			want = path.Join(dir, TrustStoreFile)
		}
		if c.Path != want {
			t.Errorf("%s reads %q with egret's settings, want %q (%s)", r.Name, c.Path, want, c.Reason)
		}
	}
}

func TestRuntimeRowsComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Runtimes() {
		if seen[r.Name] {
			t.Errorf("duplicate runtime %s", r.Name)
		}
		seen[r.Name] = true
		if len(r.Settings) == 0 || r.Default == "" || r.Description == "" || r.Note == "" {
			t.Errorf("%s: a row needs settings, default, description and note", r.Name)
		}
		if r.Reread < ReadOnce || r.Reread > ReadPolled || r.Verified < VerifiedReal || r.Verified > VerifiedModelled {
			t.Errorf("%s: reread or verification unset", r.Name)
		}
		if len(r.Sources) == 0 {
			t.Errorf("%s has no source", r.Name)
		}
		for _, s := range r.Sources {
			if !strings.HasPrefix(s, "https://") {
				t.Errorf("%s: source %q is not a URL", r.Name, s)
			}
		}
		for _, s := range r.Settings {
			if s.Effect != Adds && s.Effect != Replaces {
				t.Errorf("%s: %s has no effect", r.Name, s)
			}
		}
	}
}

func TestResolvePrecedence(t *testing.T) {
	curl, _ := RuntimeByName("curl")
	tests := []struct {
		name string
		r    string
		env  Env
		cmd  []string
		want string
	}{
		{"curl-ca-bundle-wins", "curl", Env{"CURL_CA_BUNDLE": "/a", "SSL_CERT_FILE": "/b"}, nil, "/a"},
		{"curl-falls-back-to-ssl-cert-file", "curl", Env{"SSL_CERT_FILE": "/b"}, nil, "/b"},
		{"empty-is-unset", "curl", Env{"CURL_CA_BUNDLE": "", "SSL_CERT_FILE": "/b"}, nil, "/b"},
		{"requests-ignores-ssl-cert-file", "python-requests", Env{"SSL_CERT_FILE": "/b"}, nil, ""},
		{"requests-reads-curl-ca-bundle", "python-requests", Env{"CURL_CA_BUNDLE": "/c"}, nil, "/c"},
		{"node-ignores-ssl-cert-file", "node", Env{"SSL_CERT_FILE": "/b"}, nil, ""},
		{"git-ignores-curl-ca-bundle", "git", Env{"CURL_CA_BUNDLE": "/c"}, nil, ""},
		{"java-tool-options", "java", Env{"JAVA_TOOL_OPTIONS": "-Xmx1g -Djavax.net.ssl.trustStore=/t.p12"}, nil, "/t.p12"},
		{"jdk-java-options-wins-over-tool-options", "java", Env{"JAVA_TOOL_OPTIONS": "-Djavax.net.ssl.trustStore=/t", "JDK_JAVA_OPTIONS": "-Djavax.net.ssl.trustStore=/j"}, nil, "/j"},
		{"command-line-wins", "java", Env{"JAVA_TOOL_OPTIONS": "-Djavax.net.ssl.trustStore=/t"}, []string{"-Djavax.net.ssl.trustStore=/cmd"}, "/cmd"},
		{"underscore-java-options-wins-over-all", "java", Env{"_JAVA_OPTIONS": "-Djavax.net.ssl.trustStore=/u"}, []string{"-Djavax.net.ssl.trustStore=/cmd"}, "/u"},
		{"java-ignores-env", "java", Env{"SSL_CERT_FILE": "/b"}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := RuntimeByName(tc.r)
			if !ok {
				t.Fatalf("no runtime %s", tc.r)
			}
			c := Resolve(r, tc.env, tc.cmd...)
			if c.Path != tc.want {
				t.Errorf("Resolve = %q (%s), want %q", c.Path, c.Reason, tc.want)
			}
			if c.Custom() != (tc.want != "") {
				t.Errorf("Custom() = %v", c.Custom())
			}
		})
	}
	if c := Resolve(curl, Env{}); !strings.Contains(c.Reason, "CURL_CA_BUNDLE, SSL_CERT_FILE, SSL_CERT_DIR unset") {
		t.Errorf("default reason %q", c.Reason)
	}
}

package trust

import "path"

// DefaultMountDir is where egret's webhook mounts the trust ConfigMap in
// every container (read-only, as a directory: a subPath mount would not
// follow the ConfigMap's updates).
const DefaultMountDir = "/etc/egret/trust"

// Var is one environment variable egret sets.
type Var struct{ Name, Value string }

// InjectedEnv returns the variables egret sets so that every modelled
// runtime reads the bundle in dir: SSL_CERT_FILE (Go, OpenSSL, Python ssl,
// Ruby, .NET, curl), REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS
// (which adds), GIT_SSL_CAINFO and AWS_CA_BUNDLE. SSL_CERT_DIR is left
// alone: the image's own certificate directory keeps counting where a
// runtime reads it.
func InjectedEnv(dir string) []Var {
	f := path.Join(dir, BundleFile)
	return []Var{
		{"SSL_CERT_FILE", f},
		{"REQUESTS_CA_BUNDLE", f},
		{"CURL_CA_BUNDLE", f},
		{"NODE_EXTRA_CA_CERTS", f},
		{"GIT_SSL_CAINFO", f},
		{"AWS_CA_BUNDLE", f},
	}
}

// Property is one -D system property.
type Property struct{ Key, Value string }

// JavaProperties returns the -D properties egret appends to
// JAVA_TOOL_OPTIONS: the PKCS#12 store in dir.
func JavaProperties(dir string) []Property {
	return []Property{
		{"javax.net.ssl.trustStore", path.Join(dir, TrustStoreFile)},
		{"javax.net.ssl.trustStoreType", TrustStoreType},
		{"javax.net.ssl.trustStorePassword", TrustStorePassword},
	}
}

// InjectedEnvMap is InjectedEnv plus JAVA_TOOL_OPTIONS holding the Java
// properties, as one environment (for Resolve).
func InjectedEnvMap(dir string) Env {
	e := Env{}
	for _, v := range InjectedEnv(dir) {
		e[v.Name] = v.Value
	}
	opts := ""
	for i, p := range JavaProperties(dir) {
		if i > 0 {
			opts += " "
		}
		opts += "-D" + p.Key + "=" + p.Value
	}
	e["JAVA_TOOL_OPTIONS"] = opts
	return e
}

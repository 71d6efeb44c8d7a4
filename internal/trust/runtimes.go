package trust

func env(name string, e Effect) Setting { return Setting{Kind: EnvVar, Name: name, Effect: e} }

// dir marks s as leaving a default directory searched.
func dir(s Setting, d string) Setting { s.Dir = d; return s }

// Default directories, as the rows name them.
const (
	goDirs      = "/etc/ssl/certs and /etc/pki/tls/certs (every file in them)"
	opensslDir  = "OPENSSLDIR/certs, by subject hash (Debian: /usr/lib/ssl/certs = /etc/ssl/certs)"
	libcurlPath = "the build's CA path (Debian: /etc/ssl/certs)"
)

// Runtimes returns the model, one row per runtime. The order is the order of
// docs/trust.md's table. A new runtime or version is a new row; a test
// checks that egret's injected settings reach every row.
func Runtimes() []Runtime {
	return []Runtime{
		{Name: "go", Description: "Go crypto/x509 on Linux (net/http and every Go program: kubectl, Helm, Terraform, egret)",
			Settings: []Setting{dir(env("SSL_CERT_FILE", Replaces), goDirs), env("SSL_CERT_DIR", Replaces)},
			Default:  "the first of /etc/ssl/certs/ca-certificates.crt, /etc/pki/tls/certs/ca-bundle.crt, ... that exists, plus every file in /etc/ssl/certs and /etc/pki/tls/certs",
			Reread:   ReadOnce, Verified: VerifiedReal,
			Sources: []string{
				"https://github.com/golang/go/blob/master/src/crypto/x509/root_unix.go",
				"https://github.com/golang/go/blob/master/src/crypto/x509/root.go",
			},
			Note: "SSL_CERT_FILE replaces only the bundle file: every file in /etc/ssl/certs and /etc/pki/tls/certs is still read unless SSL_CERT_DIR names other directories, so in the usual images a file with only the corporate CA still leaves the public roots trusted. The roots are loaded once (sync.Once) at the first verification."},
		{Name: "openssl", Description: "OpenSSL's default verify paths (SSL_CTX_set_default_verify_paths): the openssl command, and libraries built on it when the application asks for the defaults",
			Settings: []Setting{dir(env("SSL_CERT_FILE", Replaces), opensslDir), env("SSL_CERT_DIR", Replaces)},
			Default:  "OPENSSLDIR/cert.pem and OPENSSLDIR/certs (Debian: /usr/lib/ssl → /etc/ssl/certs/ca-certificates.crt)",
			Reread:   ReadPerRun, Verified: VerifiedReal,
			Sources: []string{
				"https://docs.openssl.org/3.0/man3/SSL_CTX_load_verify_locations/",
				"https://github.com/openssl/openssl/blob/master/crypto/x509/by_file.c",
			},
			Note: "The file is read whenever the application builds a store from the default paths; for the openssl command that is every run. SSL_CERT_FILE replaces the default file; the default directory is still searched unless SSL_CERT_DIR is set."},
		{Name: "curl", Description: "the curl command (7.x and 8.x, OpenSSL or GnuTLS builds)",
			Settings: []Setting{dir(env("CURL_CA_BUNDLE", Replaces), libcurlPath), dir(env("SSL_CERT_FILE", Replaces), libcurlPath), env("SSL_CERT_DIR", Replaces)},
			Default:  "the CA bundle chosen at build time (Debian: /etc/ssl/certs/ca-certificates.crt)",
			Reread:   ReadPerRun, Verified: VerifiedReal,
			Sources: []string{
				"https://curl.se/docs/manpage.html#--cacert",
				"https://github.com/curl/curl/blob/master/src/tool_operate.c",
			},
			Note: "Only the command reads these variables; libcurl itself (PHP, git, R) does not. --cacert wins over them."},
		{Name: "python-requests", Description: "Python requests 2.x (with trust_env, the default), and everything built on it",
			Settings: []Setting{env("REQUESTS_CA_BUNDLE", Replaces), env("CURL_CA_BUNDLE", Replaces)},
			Default:  "certifi's bundle (Debian's python3-requests: /etc/ssl/certs/ca-certificates.crt)",
			Reread:   ReadPerConnection, Verified: VerifiedReal,
			Sources: []string{
				"https://requests.readthedocs.io/en/latest/user/advanced/#ssl-cert-verification",
				"https://github.com/psf/requests/blob/main/src/requests/sessions.py",
			},
			Note: "The variable is read for every request (Session.merge_environment_settings); urllib3 loads the file for each new connection. An explicit verify= in the code wins."},
		{Name: "python-ssl", Description: "Python 3 ssl.create_default_context(): urllib.request, http.client, aiohttp, httpx (OpenSSL builds)",
			Settings: []Setting{dir(env("SSL_CERT_FILE", Replaces), opensslDir), env("SSL_CERT_DIR", Replaces)},
			Default:  "OpenSSL's default paths (see openssl)",
			Reread:   ReadPerConnection, Verified: VerifiedReal,
			Sources: []string{
				"https://docs.python.org/3/library/ssl.html#ssl.SSLContext.set_default_verify_paths",
				"https://docs.python.org/3/library/ssl.html#ssl.get_default_verify_paths",
			},
			Note: "urllib.request and http.client build a new default context for each connection, so they see a changed file; a context the application builds once and keeps does not. httpx and aiohttp default to certifi unless told to use the system store."},
		{Name: "node", Description: "Node.js (tls, https, fetch)",
			Settings: []Setting{env("NODE_EXTRA_CA_CERTS", Adds)},
			Default:  "the Mozilla roots compiled into node (SSL_CERT_FILE only with --use-openssl-ca)",
			Reread:   ReadOnce, Verified: VerifiedReal,
			Sources: []string{
				"https://nodejs.org/api/cli.html#node_extra_ca_certsfile",
			},
			Note: "The only runtime here whose variable adds to the defaults. It is read once, when the process starts; a missing or broken file is a warning, not an error."},
		{Name: "java", Description: "the JVM's default SSLContext (HttpsURLConnection, java.net.http.HttpClient, and libraries that use the default trust manager)",
			Settings: []Setting{{Kind: JavaProperty, Name: "javax.net.ssl.trustStore", Effect: Replaces}},
			Default:  "$JAVA_HOME/lib/security/jssecacerts, else cacerts (Debian: /etc/ssl/certs/java/cacerts)",
			Reread:   ReadOnce, Verified: VerifiedReal,
			Sources: []string{
				"https://docs.oracle.com/en/java/javase/17/security/java-secure-socket-extension-jsse-reference-guide.html",
			},
			Note: "javax.net.ssl.trustStoreType (PKCS12 for egret's store) and javax.net.ssl.trustStorePassword go with it. The JVM reads the -D properties from JAVA_TOOL_OPTIONS, so no image or command needs changing. The store is loaded when the default SSLContext is first built: restart."},
		{Name: "ruby", Description: "Ruby openssl (Net::HTTP, open-uri, Faraday's default adapter)",
			Settings: []Setting{dir(env("SSL_CERT_FILE", Replaces), opensslDir), env("SSL_CERT_DIR", Replaces)},
			Default:  "OpenSSL's default paths (see openssl)",
			Reread:   ReadOnce, Verified: VerifiedReal,
			Sources: []string{
				"https://github.com/ruby/openssl/blob/master/lib/openssl/ssl.rb",
				"https://docs.ruby-lang.org/en/master/OpenSSL/X509/Store.html#method-i-set_default_paths",
			},
			Note: "OpenSSL::SSL::SSLContext::DEFAULT_CERT_STORE is filled from the default paths when the openssl library is loaded, and every context without ca_file/cert_store uses it: restart."},
		{Name: "git", Description: "git over https (libcurl, OpenSSL or GnuTLS)",
			Settings: []Setting{dir(env("GIT_SSL_CAINFO", Replaces), libcurlPath+"; GnuTLS builds read every file in it")},
			Default:  "http.sslCAInfo, else libcurl's build-time bundle (Debian: /etc/ssl/certs/ca-certificates.crt)",
			Reread:   ReadPerRun, Verified: VerifiedReal,
			Sources: []string{
				"https://git-scm.com/docs/git-config#Documentation/git-config.txt-httpsslCAInfo",
			},
			Note: "GIT_SSL_CAINFO wins over http.sslCAInfo in any git config. libcurl ignores CURL_CA_BUNDLE and SSL_CERT_FILE, so git needs its own variable."},
		{Name: "aws-cli", Description: "AWS CLI and boto3/botocore (Python)",
			Settings: []Setting{env("AWS_CA_BUNDLE", Replaces)},
			Default:  "ca_bundle in ~/.aws/config, else certifi's bundle (botocore's own cacert.pem without certifi)",
			Reread:   ReadPerConnection, Verified: VerifiedReal,
			Sources: []string{
				"https://docs.aws.amazon.com/sdkref/latest/guide/feature-gen-config.html",
				"https://github.com/boto/botocore/blob/develop/botocore/configprovider.py",
			},
			Note: "AWS_CA_BUNDLE is read when a client is created; urllib3 loads the file for each new connection of that client."},
		{Name: "aws-sdk-go-v2", Description: "AWS SDK for Go v2 (config.LoadDefaultConfig)",
			Settings: []Setting{env("AWS_CA_BUNDLE", Replaces), dir(env("SSL_CERT_FILE", Replaces), goDirs)},
			Default:  "Go's system roots (see go)",
			Reread:   ReadOnce, Verified: VerifiedModelled,
			Sources: []string{
				"https://github.com/aws/aws-sdk-go-v2/blob/main/config/resolve.go",
				"https://docs.aws.amazon.com/sdkref/latest/guide/feature-gen-config.html",
			},
			Note: "With AWS_CA_BUNDLE the client's pool starts empty (x509.NewCertPool) and holds only the file's certificates. The AWS SDKs for Java and JavaScript do not read AWS_CA_BUNDLE: they use the JVM trust store and Node's roots."},
		{Name: "dotnet", Description: ".NET on Linux (HttpClient, SslStream; OpenSSL)",
			Settings: []Setting{dir(env("SSL_CERT_FILE", Replaces), "OpenSSL's default directory (every file in it)"), env("SSL_CERT_DIR", Replaces)},
			Default:  "OpenSSL's default paths (see openssl); /etc/ssl/certs when they hold nothing",
			Reread:   ReadPolled, Verified: VerifiedModelled,
			Sources: []string{
				"https://github.com/dotnet/runtime/blob/main/src/libraries/System.Security.Cryptography/src/System/Security/Cryptography/X509Certificates/OpenSslCachedSystemStoreProvider.cs",
			},
			Note: "The machine root store is re-checked every 5 seconds (the file's modification time) and reloaded at the latest after 5 minutes, so a changed bundle is picked up without a restart."},
	}
}

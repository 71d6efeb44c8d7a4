package tlslab

import (
	"bufio"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

//go:embed TLSClient.java
var javaSource string

// Client is one real runtime, run as a command.
type Client struct {
	// Name is the runtime's name in package trust's model.
	Name string
	// Tool is the executable it needs on PATH.
	Tool string
	// argv builds the command for url; twice adds the "wait for a line,
	// then fetch again" mode.
	argv func(l *Lab, url string, twice bool) []string
	// NeedsModule is a Python module it imports ("" for none).
	NeedsModule string
}

const pyRequests = `import sys, requests
def get(u):
    try:
        r = requests.get(u, timeout=10, headers={"Connection": "close"})
        print("ok", r.status_code, flush=True)
    except Exception as e:
        print("fail", type(e).__name__, str(e)[:300].replace("\n", " "), flush=True)
get(sys.argv[1])
if len(sys.argv) > 2:
    sys.stdin.readline()
    get(sys.argv[1])
`

const pyURLLib = `import sys, urllib.request
def get(u):
    try:
        with urllib.request.urlopen(u, timeout=10) as r:
            print("ok", r.status, flush=True)
    except Exception as e:
        print("fail", type(e).__name__, str(e)[:300].replace("\n", " "), flush=True)
get(sys.argv[1])
if len(sys.argv) > 2:
    sys.stdin.readline()
    get(sys.argv[1])
`

const pyBotocore = `import sys, botocore.session, botocore.config
def get(u):
    try:
        c = botocore.session.get_session().create_client("s3", endpoint_url=u, region_name="us-east-1",
            aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
            config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=10))
        c.list_buckets()
        print("ok 200", flush=True)
    except Exception as e:
        print("fail", type(e).__name__, str(e)[:300].replace("\n", " "), flush=True)
get(sys.argv[1])
if len(sys.argv) > 2:
    sys.stdin.readline()
    get(sys.argv[1])
`

const nodeClient = `const https = require("https");
const u = process.argv[1];
function get(done) {
  https.get(u, {agent: false, timeout: 10000, headers: {Connection: "close"}}, (r) => {
    console.log("ok", r.statusCode); r.resume(); r.on("end", done);
  }).on("error", (e) => { console.log("fail", e.code || "", String(e.message).replace(/\n/g, " ")); done(); });
}
get(() => {
  if (process.argv[2]) process.stdin.once("data", () => get(() => process.exit(0)));
  else process.exit(0);
});
`

const rubyClient = `require "net/http"
u = URI(ARGV[0])
def get(u)
  r = Net::HTTP.start(u.host, u.port, use_ssl: true, open_timeout: 10, read_timeout: 10) { |h| h.get(u.request_uri) }
  puts "ok #{r.code}"
rescue => e
  puts "fail #{e.class} #{e.message.gsub("\n", " ")}"
ensure
  $stdout.flush
end
get(u)
if ARGV[1]
  $stdin.gets
  get(u)
end
`

// Clients lists every runtime the lab can run.
func Clients() []Client {
	py := func(src string) func(*Lab, string, bool) []string {
		return func(_ *Lab, u string, twice bool) []string {
			a := []string{"python3", "-c", src, u}
			if twice {
				a = append(a, "twice")
			}
			return a
		}
	}
	return []Client{
		{Name: "curl", Tool: "curl", argv: func(_ *Lab, u string, _ bool) []string {
			return []string{"sh", "-c", `out=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$1" 2>&1) && echo "ok $out" || echo "fail $out"`, "curl", u}
		}},
		{Name: "openssl", Tool: "openssl", argv: func(_ *Lab, u string, _ bool) []string {
			hp := strings.TrimSuffix(strings.TrimPrefix(u, "https://"), "/")
			host := hp[:strings.LastIndexByte(hp, ':')]
			return []string{"sh", "-c", `out=$(openssl s_client -connect "$1" -servername "$2" -verify_return_error -brief </dev/null 2>&1) && echo "ok $(echo "$out" | grep -m1 Verification)" || echo "fail $(echo "$out" | grep -m1 -i verif)"`, "openssl", hp, host}
		}},
		{Name: "go", Tool: "go", argv: func(l *Lab, u string, twice bool) []string {
			a := []string{l.goClient, u}
			if twice {
				a = append(a, "twice")
			}
			return a
		}},
		{Name: "python-requests", Tool: "python3", NeedsModule: "requests", argv: py(pyRequests)},
		{Name: "python-ssl", Tool: "python3", argv: py(pyURLLib)},
		{Name: "aws-cli", Tool: "python3", NeedsModule: "botocore", argv: py(pyBotocore)},
		{Name: "node", Tool: "node", argv: func(_ *Lab, u string, twice bool) []string {
			a := []string{"node", "-e", nodeClient, u}
			if twice {
				a = append(a, "twice")
			}
			return a
		}},
		{Name: "java", Tool: "java", argv: func(l *Lab, u string, twice bool) []string {
			a := []string{"java", "-cp", l.javaDir, "TLSClient", u}
			if twice {
				a = append(a, "twice")
			}
			return a
		}},
		{Name: "ruby", Tool: "ruby", argv: func(_ *Lab, u string, twice bool) []string {
			a := []string{"ruby", "-e", rubyClient, u}
			if twice {
				a = append(a, "twice")
			}
			return a
		}},
		{Name: "git", Tool: "git", argv: func(_ *Lab, u string, _ bool) []string {
			return []string{"sh", "-c", `out=$(git ls-remote "$1" 2>&1) && echo "ok 200" || echo "fail $(echo "$out" | tr '\n' ' ')"`, "git", strings.TrimSuffix(u, "/") + "/repo.git"}
		}},
	}
}

// Lab holds what the clients need: the compiled Go and Java clients, and
// the files the sandbox binds over the system's.
type Lab struct {
	dir      string
	goClient string
	javaDir  string
	// Hosts maps names to addresses in the sandbox's /etc/hosts.
	Hosts map[string]string
	// SystemRoots replace the system CA bundle in the sandbox (the PEM
	// file, the directory /etc/ssl/certs, Java's cacerts and certifi's
	// bundle), so an origin signed by one of them stands for a public site.
	SystemRoots []*CA
	// Binds are extra bind mounts, target → source, in the sandbox.
	Binds map[string]string

	once     sync.Once
	prologue string
}

var (
	buildOnce sync.Once
	goBin     string
	buildErr  error
)

// New prepares a lab: it builds the Go client and compiles the Java one
// when their tools exist (clients whose tools are missing are skipped by
// Need).
func New(t testing.TB) *Lab {
	t.Helper()
	testutil.NeedRoot(t)
	testutil.NeedTool(t, "unshare")
	l := &Lab{dir: t.TempDir(), Hosts: map[string]string{}, Binds: map[string]string{}}
	if _, err := exec.LookPath("go"); err == nil {
		buildOnce.Do(func() {
			d, err := os.MkdirTemp("", "egret-goclient-")
			if err != nil {
				buildErr = err
				return
			}
			goBin = filepath.Join(d, "goclient")
			out, err := exec.Command("go", "build", "-o", goBin, "egret.io/egret/internal/testutil/tlslab/goclient").CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("build goclient: %v\n%s", err, out)
			}
		})
		if buildErr != nil {
			t.Fatal(buildErr)
		}
		l.goClient = goBin
	}
	if _, err := exec.LookPath("javac"); err == nil {
		l.javaDir = filepath.Join(l.dir, "java")
		if err := os.MkdirAll(l.javaDir, 0o755); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(l.javaDir, "TLSClient.java")
		if err := os.WriteFile(src, []byte(javaSource), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("javac", "-d", l.javaDir, src).CombinedOutput(); err != nil {
			t.Fatalf("javac: %v\n%s", err, out)
		}
	}
	return l
}

// Need skips (or fails under EGRET_REQUIRE_ALL=1) when c cannot run here.
func (l *Lab) Need(t testing.TB, c Client) {
	t.Helper()
	testutil.NeedTool(t, c.Tool)
	if c.Name == "java" {
		testutil.NeedTool(t, "javac")
	}
	if c.NeedsModule != "" {
		if err := exec.Command("python3", "-c", "import "+c.NeedsModule).Run(); err != nil {
			testutil.Missing(t, "python3 module "+c.NeedsModule+" is not installed (scripts/deps installs it)")
		}
	}
}

// ClientByName returns the lab client for a runtime name.
func ClientByName(name string) (Client, bool) {
	for _, c := range Clients() {
		if c.Name == name {
			return c, true
		}
	}
	return Client{}, false
}

// sandbox writes the files the mount namespace binds and returns the
// shell prologue that binds them; it is built once, at the first command,
// from Hosts, SystemRoots and Binds as they are then.
func (l *Lab) sandbox(t testing.TB) string {
	t.Helper()
	l.once.Do(func() { l.prologue = l.buildSandbox(t) })
	return l.prologue
}

func (l *Lab) buildSandbox(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp(l.dir, "sandbox-")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	bind := func(src, dst string) {
		fmt.Fprintf(&b, "mount --bind %q %q || exit 97; ", src, dst)
	}
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	for n, a := range l.Hosts {
		fmt.Fprintf(&hosts, "%s %s\n", a, n)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(d, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bind(write("hosts", []byte(hosts.String())), "/etc/hosts")
	if len(l.SystemRoots) > 0 {
		var pemData []byte
		for _, ca := range l.SystemRoots {
			pemData = append(pemData, ca.PEM()...)
		}
		// Debian's layout: the bundle, one file per root and OpenSSL's
		// subject-hash links to them.
		certs := filepath.Join(d, "certs")
		write("certs/ca-certificates.crt", pemData)
		for i, ca := range l.SystemRoots {
			name := fmt.Sprintf("test-root-%d.pem", i)
			f := write("certs/"+name, ca.PEM())
			if h, err := exec.Command("openssl", "x509", "-noout", "-subject_hash", "-in", f).Output(); err == nil {
				if err := os.Symlink(name, filepath.Join(certs, strings.TrimSpace(string(h))+".0")); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := os.Stat("/etc/ssl/certs/java"); err == nil {
			write("certs/java/cacerts", javaStore(t, l.SystemRoots))
		}
		bind(certs, "/etc/ssl/certs")
		for _, p := range certifiBundles() {
			bind(write("certifi-"+fmt.Sprint(len(p)), pemData), p)
		}
	}
	for dst, src := range l.Binds {
		fmt.Fprintf(&b, "mkdir -p %q 2>/dev/null; ", dst)
		bind(src, dst)
	}
	return b.String()
}

var (
	certifiOnce  sync.Once
	certifiPaths []string
)

// certifiBundles are the CA files Python's certifi and botocore ship.
func certifiBundles() []string {
	certifiOnce.Do(func() { certifiPaths = findCertifi() })
	return certifiPaths
}

func findCertifi() []string {
	out, err := exec.Command("python3", "-c", `
import os
for m in ("certifi", "botocore"):
    try:
        mod = __import__(m)
        p = mod.where() if m == "certifi" else os.path.join(os.path.dirname(mod.__file__), "cacert.pem")
        if os.path.exists(p): print(p)
    except Exception: pass
`).Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// Command returns the client's command for url inside a fresh private mount
// namespace (with the lab's hosts, system roots and binds) and env as its
// whole environment (PATH and HOME are added when env lacks them). prefix
// is prepended to the argv (e.g. "ip netns exec NAME").
func (l *Lab) Command(ctx context.Context, t testing.TB, c Client, url string, twice bool, env []string, prefix ...string) *exec.Cmd {
	t.Helper()
	pro := l.sandbox(t)
	argv := append(append([]string{}, prefix...), "unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", pro+`exec "$@"`, "sandbox")
	argv = append(argv, c.argv(l, url, twice)...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	has := func(n string) bool {
		for _, e := range env {
			if strings.HasPrefix(e, n+"=") {
				return true
			}
		}
		return false
	}
	env = append([]string{}, env...)
	if !has("PATH") {
		env = append(env, "PATH="+os.Getenv("PATH"))
	}
	if !has("HOME") {
		home := filepath.Join(l.dir, "home")
		_ = os.MkdirAll(home, 0o755)
		env = append(env, "HOME="+home)
	}
	cmd.Env = append(env, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1")
	return cmd
}

// Result is one fetch: OK and the line the client printed.
type Result struct {
	OK   bool
	Line string
}

func (r Result) String() string { return r.Line }

// TrustFailure reports whether a failed fetch failed on the certificate
// (not on a refused connection, a name that does not resolve, a crash).
func (r Result) TrustFailure() bool {
	l := strings.ToLower(r.Line)
	if r.OK {
		return false
	}
	for _, w := range []string{"certif", "verif", "ssl", "pkix", "x509", "trust", "issuer"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

func parse(line string) Result {
	line = strings.TrimSpace(line)
	return Result{OK: strings.HasPrefix(line, "ok "), Line: line}
}

// Run runs c once for url and returns what it printed.
func (l *Lab) Run(t testing.TB, c Client, url string, env []string, prefix ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := l.Command(ctx, t, c, url, false, env, prefix...).CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, ln := range lines {
		if strings.HasPrefix(ln, "ok ") || strings.HasPrefix(ln, "fail") {
			return parse(ln)
		}
	}
	t.Fatalf("%s printed no result (%v):\n%s", c.Name, err, out)
	return Result{}
}

// RunTwice starts c, lets it fetch url, calls between (which changes the
// CA file), then lets the same process fetch again. It reports both
// results. Clients that are one process per fetch are run twice.
func (l *Lab) RunTwice(t testing.TB, c Client, url string, env []string, between func()) (first, second Result) {
	t.Helper()
	if c.Name == "curl" || c.Name == "git" || c.Name == "openssl" {
		first = l.Run(t, c, url, env)
		between()
		return first, l.Run(t, c, url, env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := l.Command(ctx, t, c, url, true, env)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(outR)
	next := func() Result {
		for {
			ln, err := br.ReadString('\n')
			if strings.HasPrefix(ln, "ok ") || strings.HasPrefix(ln, "fail") {
				return parse(ln)
			}
			if err != nil {
				t.Fatalf("%s: no result: %v\n%s", c.Name, err, stderr.String())
			}
		}
	}
	first = next()
	between()
	if _, err := io.WriteString(in, "again\n"); err != nil {
		t.Fatal(err)
	}
	second = next()
	in.Close()
	_ = cmd.Wait()
	return first, second
}

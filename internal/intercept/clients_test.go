package intercept

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/trust"
)

// A real client: a program that reads the proxy and the CA bundle from the
// environment the way its runtime does, sends GET URL with
// "Authorization: Bearer client-own-token" and "X-Client: NAME", and prints
// "ok STATUS BODY" or "fail REASON".
type realClient struct {
	name string
	// h2 says the client offers HTTP/2 (so egret must speak it).
	h2 bool
	// argv runs it for url; tool is what must be installed.
	argv func(url string) []string
	tool string
	// module is a Python module it needs; node a package of
	// $EGRET_CACHE/intercept-clients.
	module, node string
}

const pyRequestsClient = `import os, sys, requests
try:
    r = requests.get(sys.argv[1], headers={"Authorization": "Bearer client-own-token", "X-Client": "python-requests"}, timeout=20)
    print("ok", r.status_code, r.text.replace("\n", " "))
except Exception as e:
    print("fail", type(e).__name__, str(e)[:400].replace("\n", " "))
`

const pyURLLibClient = `import sys, urllib.request
try:
    req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer client-own-token", "X-Client": "python-urllib"})
    with urllib.request.urlopen(req, timeout=20) as r:
        print("ok", r.status, r.read().decode().replace("\n", " "))
except Exception as e:
    print("fail", type(e).__name__, str(e)[:400].replace("\n", " "))
`

const pyHTTPXClient = `import sys, httpx
try:
    with httpx.Client(http2=True, timeout=20) as c:
        r = c.get(sys.argv[1], headers={"Authorization": "Bearer client-own-token", "X-Client": "python-httpx"})
        print("ok", r.status_code, r.text.replace("\n", " "))
except Exception as e:
    print("fail", type(e).__name__, str(e)[:400].replace("\n", " "))
`

const nodeUndiciClient = `const { fetch, EnvHttpProxyAgent } = require("undici");
fetch(process.argv[1], { dispatcher: new EnvHttpProxyAgent({ allowH2: true, requestTls: { allowH2: true } }),
    headers: { authorization: "Bearer client-own-token", "x-client": "node-undici" } })
  .then(async (r) => console.log("ok", r.status, (await r.text()).replace(/\n/g, " ")))
  .catch((e) => console.log("fail", e.name, String((e.cause && e.cause.message) || e.message).replace(/\n/g, " ")));
`

// nodeFetchClient is Node's own fetch; before Node 24's NODE_USE_ENV_PROXY
// it follows the proxy variables once an EnvHttpProxyAgent is the global
// dispatcher.
const nodeFetchClient = `const { setGlobalDispatcher, EnvHttpProxyAgent } = require("undici");
setGlobalDispatcher(new EnvHttpProxyAgent());
fetch(process.argv[1], { headers: { authorization: "Bearer client-own-token", "x-client": "node-fetch" } })
  .then(async (r) => console.log("ok", r.status, (await r.text()).replace(/\n/g, " ")))
  .catch((e) => console.log("fail", e.name, String((e.cause && e.cause.message) || e.message).replace(/\n/g, " ")));
`

const nodeAxiosClient = `const axios = require("axios");
const { HttpsProxyAgent } = require("https-proxy-agent");
axios.get(process.argv[1], { proxy: false, httpsAgent: new HttpsProxyAgent(process.env.HTTPS_PROXY),
    headers: { Authorization: "Bearer client-own-token", "X-Client": "node-axios" }, responseType: "text", transformResponse: (d) => d })
  .then((r) => console.log("ok", r.status, String(r.data).replace(/\n/g, " ")))
  .catch((e) => console.log("fail", e.code || e.name, String(e.message).replace(/\n/g, " ")));
`

const javaClient = `import java.net.*; import java.net.http.*;
public class InterceptClient {
  public static void main(String[] a) {
    try {
      HttpClient c = HttpClient.newBuilder().proxy(ProxySelector.getDefault()).connectTimeout(java.time.Duration.ofSeconds(20)).build();
      HttpRequest r = HttpRequest.newBuilder(URI.create(a[0])).header("Authorization", "Bearer client-own-token").header("X-Client", "java-httpclient").build();
      HttpResponse<String> resp = c.send(r, HttpResponse.BodyHandlers.ofString());
      System.out.println("ok " + resp.statusCode() + " " + resp.body().replace("\n", " "));
    } catch (Exception e) {
      System.out.println("fail " + e.getClass().getSimpleName() + " " + String.valueOf(e.getMessage()).replace("\n", " "));
    }
  }
}
`

const rubyClient = `require "net/http"
u = URI(ARGV[0])
begin
  r = Net::HTTP.start(u.host, u.port, use_ssl: true, open_timeout: 20, read_timeout: 20) do |h|
    h.get(u.request_uri, { "Authorization" => "Bearer client-own-token", "X-Client" => "ruby-net-http" })
  end
  puts "ok #{r.code} #{r.body.gsub("\n", " ")}"
rescue => e
  puts "fail #{e.class} #{e.message.gsub("\n", " ")}"
end
`

const goClient = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

func main() {
	req, _ := http.NewRequest("GET", os.Args[1], nil)
	req.Header.Set("Authorization", "Bearer client-own-token")
	req.Header.Set("X-Client", "go")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("fail", err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Println("ok", resp.StatusCode, strings.ReplaceAll(string(b), "\n", " "))
}
`

func realClients(dir string) []realClient {
	py := func(src string) func(string) []string {
		return func(u string) []string { return []string{"/usr/bin/python3", "-c", src, u} }
	}
	node := func(src string) func(string) []string {
		return func(u string) []string { return []string{"node", "-e", src, u} }
	}
	return []realClient{
		{name: "curl", h2: true, tool: "curl", argv: func(u string) []string {
			return []string{"sh", "-c", `out=$(curl -sS --max-time 20 -H 'Authorization: Bearer client-own-token' -H 'X-Client: curl' -w ' %{http_code}' "$1" 2>&1) && echo "ok ${out##* } ${out% *}" || echo "fail $out"`, "curl", u}
		}},
		{name: "python-requests", tool: "/usr/bin/python3", module: "requests", argv: py(pyRequestsClient)},
		{name: "python-urllib", tool: "/usr/bin/python3", argv: py(pyURLLibClient)},
		{name: "python-httpx", h2: true, tool: "/usr/bin/python3", module: "httpx", argv: py(pyHTTPXClient)},
		{name: "node-undici", h2: true, tool: "node", node: "undici", argv: node(nodeUndiciClient)},
		{name: "node-fetch", tool: "node", node: "undici", argv: node(nodeFetchClient)},
		{name: "node-axios", tool: "node", node: "axios", argv: node(nodeAxiosClient)},
		{name: "java-httpclient", h2: true, tool: "java", argv: func(u string) []string {
			return []string{"java", "-cp", filepath.Join(dir, "java"), "InterceptClient", u}
		}},
		{name: "go", h2: true, tool: "go", argv: func(u string) []string { return []string{filepath.Join(dir, "goclient"), u} }},
		{name: "ruby-net-http", tool: "ruby", argv: func(u string) []string { return []string{"ruby", "-e", rubyClient, u} }},
	}
}

// TestRealClients sends each real client through the engine with the
// environment egret's webhook gives a pod — the proxy variables in both
// cases (Ruby's Net::HTTP reads http_proxy even for https URLs),
// the trust variables of package trust pointing at a bundle of the system
// roots plus the interception CA, JAVA_TOOL_OPTIONS with the proxy and the
// PKCS#12 store — and checks that the origin got egret's credential and not
// the client's, that the client never sees egret's credential, and that
// clients that offer HTTP/2 spoke it with egret.
func TestRealClients(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real runtimes")
	}
	l := newLab(t)
	var mu sync.Mutex
	got := map[string]seen{}
	l.origin("api.example.test", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("X-Client")] = seen{Method: r.Method, Path: r.URL.EscapedPath(), Proto: r.Proto, Headers: r.Header}
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello from the origin\n")
	}))
	site, _ := apiSite(t, "api.example.test", RulesSpec{Rules: []RuleSpec{{Action: "allow", Methods: []string{"GET"}, PathPrefixes: []string{"/v1"}}}})
	l.setSites(site)

	dir := t.TempDir()
	env := podEnv(t, l, dir)
	clients := realClients(dir)
	buildClients(t, dir)
	url := "https://api.example.test:" + port(l, "api.example.test") + "/v1/models"
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			needClient(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			argv := c.argv(url)
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Env = env
			if c.node != "" {
				cmd.Env = append(cmd.Env, "NODE_PATH="+nodeModules())
			}
			out, err := cmd.CombinedOutput()
			line := strings.TrimSpace(string(out))
			if i := strings.LastIndex(line, "\n"); i >= 0 && !strings.HasPrefix(line, "ok") {
				line = line[i+1:]
			}
			if !strings.HasPrefix(line, "ok 200 hello from the origin") {
				t.Fatalf("%s: %v\n%s", c.name, err, out)
			}
			if strings.Contains(string(out), injectedToken) {
				t.Errorf("the client saw egret's credential")
			}
			mu.Lock()
			s, ok := got[c.name]
			mu.Unlock()
			if !ok {
				t.Fatalf("the origin saw no request from %s", c.name)
			}
			if a := s.Headers["Authorization"]; len(a) != 1 || a[0] != "Bearer "+injectedToken {
				t.Errorf("the origin saw Authorization %q", a)
			}
			if k := s.Headers["X-Api-Key"]; len(k) != 1 || k[0] != injectedKey {
				t.Errorf("the origin saw x-api-key %q", k)
			}
			proto := ""
			for _, ev := range l.logged() {
				if ev.Path == "/v1/models" && ev.Status == 200 {
					proto = ev.Proto // the last one is this client's
				}
			}
			want := "HTTP/1.1"
			if c.h2 {
				want = "HTTP/2.0"
			}
			if proto != want {
				t.Errorf("%s spoke %s with egret, want %s", c.name, proto, want)
			}
		})
	}
}

// podEnv writes the trust bundle and store as egret's trust controller
// does and returns the environment the webhook injects.
func podEnv(t *testing.T, l *lab, dir string) []string {
	t.Helper()
	system, _, err := trust.SystemRoots()
	if err != nil {
		t.Fatal(err)
	}
	a := l.issuer.Authority()
	b, err := trust.Build(system, a.Trusted)
	if err != nil {
		t.Fatal(err)
	}
	store, err := b.TrustStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	trustDir := filepath.Join(dir, "trust")
	os.MkdirAll(trustDir, 0o755)
	if err := os.WriteFile(filepath.Join(trustDir, trust.BundleFile), b.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trustDir, trust.TrustStoreFile), store, 0o644); err != nil {
		t.Fatal(err)
	}
	proxy := "http://" + l.front
	host, portS := l.front[:strings.LastIndexByte(l.front, ':')], l.front[strings.LastIndexByte(l.front, ':')+1:]
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "HTTPS_PROXY=" + proxy, "https_proxy=" + proxy,
		"HTTP_PROXY=" + proxy, "http_proxy=" + proxy,
		"NO_PROXY=localhost", "no_proxy=localhost"}
	for _, v := range trust.InjectedEnv(trustDir) {
		env = append(env, v.Name+"="+v.Value)
	}
	opts := "-Dhttps.proxyHost=" + host + " -Dhttps.proxyPort=" + portS
	for _, p := range trust.JavaProperties(trustDir) {
		opts += " -D" + p.Key + "=" + p.Value
	}
	return append(env, "JAVA_TOOL_OPTIONS="+opts)
}

func buildClients(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("go"); err == nil {
		src := filepath.Join(dir, "goclient-src")
		os.MkdirAll(src, 0o755)
		os.WriteFile(filepath.Join(src, "main.go"), []byte(goClient), 0o644)
		os.WriteFile(filepath.Join(src, "go.mod"), []byte("module goclient\n\ngo 1.22\n"), 0o644)
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "goclient"), ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the Go client: %v\n%s", err, out)
		}
	}
	if _, err := exec.LookPath("javac"); err == nil {
		jd := filepath.Join(dir, "java")
		os.MkdirAll(jd, 0o755)
		src := filepath.Join(jd, "InterceptClient.java")
		os.WriteFile(src, []byte(javaClient), 0o644)
		if out, err := exec.Command("javac", "-d", jd, src).CombinedOutput(); err != nil {
			t.Fatalf("javac: %v\n%s", err, out)
		}
	}
}

func nodeModules() string {
	c := os.Getenv("EGRET_CACHE")
	if c == "" {
		home, _ := os.UserHomeDir()
		c = filepath.Join(home, ".cache", "egret")
	}
	return filepath.Join(c, "intercept-clients", "node_modules")
}

// needClient skips (or fails under EGRET_REQUIRE_ALL=1) a client that is
// not installed.
func needClient(t *testing.T, c realClient) {
	t.Helper()
	testutil.NeedTool(t, c.tool)
	if c.name == "java-httpclient" {
		testutil.NeedTool(t, "javac")
	}
	if c.module != "" {
		if err := exec.Command(c.tool, "-c", "import "+c.module).Run(); err != nil {
			testutil.Missing(t, "python module "+c.module+" for "+c.tool+" (scripts/deps/28-intercept-clients.sh installs it)")
		}
	}
	if c.node != "" {
		if _, err := os.Stat(filepath.Join(nodeModules(), c.node)); err != nil {
			testutil.Missing(t, "node package "+c.node+" (scripts/deps/28-intercept-clients.sh installs it)")
		}
	}
}

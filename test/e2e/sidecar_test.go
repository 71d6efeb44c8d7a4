package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/netns"
	"egret.io/egret/internal/testutil/squid"
)

// The addresses below exist only inside the test's own network namespace,
// on its loopback device: nothing leaves the machine.
const (
	paymentsIP = "10.96.50.10"   // a "Service" inside the cluster range
	dbIP       = "10.96.50.11"   // reached by a name that resolves into the cluster range
	partnerIP  = "192.168.77.20" // "the internet": reachable, but policy says go through the upstream
	squidAddr  = "127.0.0.1:3129"
	egretAddr  = "127.0.0.1:3128"
	adminAddr  = "127.0.0.1:9901"
	squidUser  = "svc-egress"
	squidPass  = "p@ss:w0rd/%"
	squidEnc   = "p%40ss%3Aw0rd%2F%25"
)

type world struct {
	ns    *netns.NS
	squid *squid.Squid
	dir   string
}

// newWorld builds the namespace: origins (egret echo over HTTP, openssl
// s_server over TLS), and Squid with Basic auth resolving the partner name
// from its hosts file.
func newWorld(t *testing.T) *world {
	t.Helper()
	netns.Require(t, "squid", "curl", "openssl")
	ns := netns.New(t, "e2e")
	// The namespace's own loopback device carries them (the kernel here has
	// no dummy driver); they are still ordinary, non-loopback addresses.
	for _, a := range []string{paymentsIP, dbIP, partnerIP} {
		ns.Run(t, "ip", "addr", "add", a+"/32", "dev", "lo")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	w := &world{ns: ns, dir: dir}
	for _, ip := range []string{paymentsIP, dbIP, partnerIP} {
		w.start(t, "echo-"+ip, nil, egretBin, "echo", "--listen", ip+":8080")
	}
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	out, err := exec.Command("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
		"-subj", "/CN=partner.example.com", "-addext", "subjectAltName=DNS:partner.example.com",
		"-keyout", key, "-out", cert).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl req: %v: %s", err, out)
	}
	w.start(t, "tls-origin", nil, "openssl", "s_server", "-quiet", "-www", "-accept", partnerIP+":8443", "-cert", cert, "-key", key)
	w.waitPort(t, partnerIP+":8443")
	w.squid = squid.Start(t, squid.Options{
		User: squidUser, Password: squidPass, Listen: squidAddr,
		Hosts:     map[string]string{"partner.example.com": partnerIP},
		Namespace: ns,
	})
	for _, ip := range []string{paymentsIP, dbIP, partnerIP} {
		w.waitPort(t, ip+":8080")
	}
	return w
}

// start runs argv inside the namespace until the test ends; its output
// goes to a file shown when the test fails.
func (w *world) start(t *testing.T, name string, env []string, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := w.ns.Command(context.Background(), argv...)
	if env != nil {
		cmd.Env = env
	}
	logPath := filepath.Join(w.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
			f.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("%s output:\n%s", name, b)
			}
		})
	})
	return cmd
}

func (w *world) waitPort(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		c, err := w.ns.Dial(ctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s in %s", addr, w.ns.Name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startEgret runs `egret proxy` inside the namespace with exactly env (plus
// PATH), and returns the path of its log.
func (w *world) startEgret(t *testing.T, name string, env ...string) string {
	t.Helper()
	hosts := filepath.Join(w.dir, "hosts")
	os.WriteFile(hosts, []byte(fmt.Sprintf("%s payments.default.svc.cluster.local\n%s db.internal.example\n", paymentsIP, dbIP)), 0o644)
	base := []string{"PATH=" + os.Getenv("PATH"), "EGRET_HOSTS_FILE=" + hosts,
		// Names not in the hosts file must fail here, never reach real DNS.
		"EGRET_DNS_SERVERS=127.0.0.1:1"}
	w.start(t, name, append(base, env...), egretBin, "proxy")
	return filepath.Join(w.dir, name+".log")
}

// client runs a client inside the namespace and returns its stdout.
func (w *world) client(t *testing.T, env []string, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := w.ns.Command(ctx, argv...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.dir}, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, stderr.String())
	}
	return string(out), nil
}

// logLines returns egret's JSON access lines.
func logLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && (m["msg"] == "request" || m["msg"] == "tunnel") {
			out = append(out, m)
		}
	}
	return out
}

// lastFor returns the last access line for dest, waiting briefly for it.
func lastFor(t *testing.T, path, dest string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines := logLines(t, path)
		for i := len(lines) - 1; i >= 0; i-- {
			if lines[i]["dest"] == dest {
				return lines[i]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log line for %s", dest)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSidecarManifest is the "done when": egret started with the
// environment of a sidecar manifest sends internal names, internal CIDRs and
// names resolving into them direct, and everything else through an
// authenticated Squid, for plain HTTP and CONNECT, with real curl and Python.
func TestSidecarManifest(t *testing.T) {
	w := newWorld(t)
	logPath := w.startEgret(t, "egret",
		"LISTEN_ADDR="+egretAddr,
		"ADMIN_LISTEN_ADDR="+adminAddr,
		"DIRECT_CIDRS=10.96.0.0/12",
		"DIRECT_SUFFIXES=.svc,.cluster.local",
		"UPSTREAM_PROXY=http://"+squidUser+":"+squidEnc+"@"+squidAddr,
	)
	w.waitPort(t, egretAddr)
	proxyEnv := []string{"http_proxy=http://" + egretAddr, "https_proxy=http://" + egretAddr, "HTTP_PROXY=http://" + egretAddr, "HTTPS_PROXY=http://" + egretAddr}

	cases := []struct {
		name, url, dest, route, reason string
		viaSquid                       bool
	}{
		{"internal-name", "http://payments.default.svc.cluster.local:8080/pay", "payments.default.svc.cluster.local:8080", "direct", "suffix", false},
		{"internal-cidr", "http://" + paymentsIP + ":8080/x", paymentsIP + ":8080", "direct", "cidr", false},
		{"name-resolving-into-cidr", "http://db.internal.example:8080/q", "db.internal.example:8080", "direct", "resolved_cidr", false},
		{"outside-name", "http://partner.example.com:8080/api", "partner.example.com:8080", "upstream", "default", true},
	}
	for _, tc := range cases {
		for _, mode := range []string{"forward", "connect"} {
			t.Run(tc.name+"/curl-"+mode, func(t *testing.T) {
				args := []string{"curl", "-sS", "--fail", "--max-time", "10", "-x", "http://" + egretAddr}
				if mode == "connect" {
					args = append(args, "-p") // tunnel plain HTTP through CONNECT
				}
				before := len(w.squid.AccessLog())
				body, err := w.client(t, nil, append(args, tc.url)...)
				if err != nil {
					t.Fatal(err)
				}
				var echo struct {
					Path    string
					Headers map[string][]string
				}
				if err := json.Unmarshal([]byte(body), &echo); err != nil {
					t.Fatalf("origin answer %q: %v", body, err)
				}
				via := strings.Join(echo.Headers["Via"], ", ")
				if mode == "forward" {
					if !strings.Contains(via, "(egret)") {
						t.Errorf("origin saw Via %q: egret missing", via)
					}
					if strings.Contains(via, "squid") != tc.viaSquid {
						t.Errorf("origin saw Via %q; through squid = %v, want %v", via, !tc.viaSquid, tc.viaSquid)
					}
				}
				line := lastFor(t, logPath, tc.dest)
				if line["route"] != tc.route || line["reason"] != tc.reason {
					t.Errorf("egret logged route=%v reason=%v, want %s/%s: %v", line["route"], line["reason"], tc.route, tc.reason, line)
				}
				newSquid := w.squid.AccessLog()[before:]
				if tc.viaSquid {
					want := "GET " + tc.url
					if mode == "connect" {
						want = "CONNECT " + tc.dest
					}
					w.squid.WaitLog(t, want+" "+squidUser)
				} else if len(newSquid) > 0 {
					t.Errorf("squid saw a direct destination: %v", newSquid)
				}
			})
		}
	}

	t.Run("tls-through-squid/curl", func(t *testing.T) {
		out, err := w.client(t, proxyEnv, "curl", "-sS", "-k", "--fail", "--max-time", "10", "https://partner.example.com:8443/")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "s_server") {
			t.Errorf("TLS origin answer: %.200q", out)
		}
		w.squid.WaitLog(t, "CONNECT partner.example.com:8443 "+squidUser)
	})
	t.Run("python-requests", func(t *testing.T) {
		testutil.NeedTool(t, "python3")
		script := `
import json, requests, urllib3
urllib3.disable_warnings()
out = {}
out["direct"] = requests.get("http://payments.default.svc.cluster.local:8080/py", timeout=10).json()["headers"].get("Via")
out["upstream"] = requests.get("http://partner.example.com:8080/py", timeout=10).json()["headers"].get("Via")
out["tls"] = requests.get("https://partner.example.com:8443/", timeout=10, verify=False).status_code
print(json.dumps(out))
`
		out, err := w.client(t, proxyEnv, "python3", "-c", script)
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Direct, Upstream []string
			TLS              int
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("python said %q: %v", out, err)
		}
		if d := strings.Join(res.Direct, ","); strings.Contains(d, "squid") || !strings.Contains(d, "egret") {
			t.Errorf("python direct Via %q", d)
		}
		if u := strings.Join(res.Upstream, ","); !strings.Contains(u, "squid") {
			t.Errorf("python upstream Via %q", u)
		}
		if res.TLS != 200 {
			t.Errorf("python https status %d", res.TLS)
		}
	})
	t.Run("no-password-in-logs", func(t *testing.T) {
		b, _ := os.ReadFile(logPath)
		for _, s := range []string{squidPass, squidEnc} {
			if strings.Contains(string(b), s) {
				t.Errorf("egret's log holds the upstream password (%q)", s)
			}
		}
	})

	// Same sidecar, wrong password at the upstream: the client sees a 502
	// naming the upstream, never a 407 blaming its own credentials.
	t.Run("upstream-407-is-502", func(t *testing.T) {
		bad := w.startEgret(t, "egret-badpw",
			"LISTEN_ADDR=127.0.0.1:3130", "ADMIN_LISTEN_ADDR=off",
			"UPSTREAM_PROXY=http://"+squidUser+":not-the-password@"+squidAddr)
		w.waitPort(t, "127.0.0.1:3130")
		for _, extra := range [][]string{nil, {"-p"}} {
			args := append([]string{"curl", "-sS", "-o", "/dev/null", "-D", "-", "--max-time", "10", "-x", "http://127.0.0.1:3130"}, extra...)
			hdr, _ := w.client(t, nil, append(args, "http://partner.example.com:8080/")...)
			if !strings.Contains(hdr, " 502") || !strings.Contains(hdr, "Proxy-Status: egret; error=upstream_auth_required; next-hop=\"http://"+squidAddr+"\"") {
				t.Errorf("curl %v got:\n%s", extra, hdr)
			}
			if strings.Contains(hdr, "not-the-password") {
				t.Error("password in the answer")
			}
		}
		b, _ := os.ReadFile(bad)
		if strings.Contains(string(b), "not-the-password") {
			t.Error("password in the log")
		}
	})
}

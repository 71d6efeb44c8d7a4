package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

// forbiddingKubeconfig writes a kubeconfig for an API server on loopback
// that answers every request 403 Forbidden, as RBAC does for a service
// account that may not list or watch: client-go logs that at error level.
func forbiddingKubeconfig(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/version" {
			fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
			return
		}
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: User \"system:serviceaccount:egret-system:egret\" cannot list resource \"pods\"","reason":"Forbidden","code":403}`)
	}))
	t.Cleanup(srv.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600)
	return kc
}

// stderrUntil runs egret with args and returns its stderr lines up to the
// first that contains want (or 90 s), then stops it.
func stderrUntil(t *testing.T, want string, args ...string) []string {
	t.Helper()
	bin := testutil.BuildEgret(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "KUBECONFIG=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var lines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), want) {
			return lines
		}
	}
	t.Fatalf("egret %s: no stderr line with %q; got:\n%s", strings.Join(args, " "), want, strings.Join(lines, "\n"))
	return nil
}

// TestClientGoLogLines: a gateway with per-workload policy and a webhook
// whose API server forbids them log client-go's failures (and their own
// end) as lines
// of their own format — JSON objects by default, slog text with
// --log-format text — never as klog's text inside the JSON stream.
func TestClientGoLogLines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs egret")
	}
	kc := forbiddingKubeconfig(t)
	gateway := []string{"proxy", "--role", "gateway", "--listen", "127.0.0.1:0", "--admin-listen", "off",
		"--policy", "--policy-kubeconfig", kc}
	webhook := []string{"webhook", "--kubeconfig", kc, "--listen", "127.0.0.1:0", "--leader-elect=false",
		"--gateway-url", "http://egret-gateway.egret-system.svc:3128"}
	// The gateway's policy watch meets the 403 in client-go's reflector;
	// the webhook stops at its first request (controller-runtime's
	// discovery), and that last line is in its format too.
	for _, tc := range []struct {
		name, want string
		args       []string
	}{{"gateway", "forbidden", gateway}, {"webhook", "egret webhook stopped", webhook}} {
		t.Run(tc.name+"/json", func(t *testing.T) {
			lines := stderrUntil(t, tc.want, tc.args...)
			for _, l := range lines {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Errorf("not a JSON line: %q", l)
					continue
				}
				if m["time"] == nil || m["level"] == nil || m["msg"] == nil {
					t.Errorf("line without time, level or msg: %s", l)
				}
			}
		})
		t.Run(tc.name+"/text", func(t *testing.T) {
			lines := stderrUntil(t, tc.want, append(tc.args, "--log-format", "text")...)
			for _, l := range lines {
				if !strings.HasPrefix(l, "time=") || !strings.Contains(l, " level=") {
					t.Errorf("not a slog text line: %q", l)
				}
			}
		})
	}
	var out, errw strings.Builder
	if code := Main([]string{"webhook", "--log-format", "xml"}, strings.NewReader(""), &out, &errw); code != 2 ||
		!strings.Contains(errw.String(), "--log-format: log format \"xml\": want json or text") {
		t.Errorf("webhook --log-format xml: exit %d, %q", code, errw.String())
	}
}

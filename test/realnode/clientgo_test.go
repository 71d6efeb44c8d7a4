package realnode

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// client-go in an injected pod (rest.InClusterConfig: the API server at
// https://$KUBERNETES_SERVICE_HOST, an IP, as every in-cluster client
// dials it) with a Role for its ServiceAccount, in env-variable (gateway)
// mode and in sidecar mode: it lists its namespace's pods, net/http picks
// no proxy for the API server, and neither the gateways' nor the sidecar's
// log has a line for the API server's address — the injected NO_PROXY
// covers it for Go. The same program with NO_PROXY unset does reach egret
// (the line the check looks for is there then).
func (in *install) clientGo(t *testing.T) {
	n := in.n
	image := n.ClientGoImage(t)
	ns := namespace(t, n, "clientgo", map[string]string{"egret.io/inject": "enabled"})
	n.KubectlT(t, "create", "role", "pod-reader", "-n", ns, "--verb=get,list", "--resource=pods")
	n.KubectlT(t, "create", "rolebinding", "pod-reader", "-n", ns, "--role=pod-reader", "--serviceaccount="+ns+":default")
	imagePod(t, n, ns, "env", image)
	imagePod(t, n, ns, "sidecar", image, "egret.io/mode", "sidecar")

	// egretLog is the log text of the gateways or of the pod's sidecar.
	egretLog := func(pod string) string {
		if pod == "" {
			return n.KubectlT(t, "logs", "-n", "egret-system", "-l", "app.kubernetes.io/name=egret-gateway", "--tail=-1", "--max-log-requests=10")
		}
		return n.KubectlT(t, "logs", "-n", ns, pod, "-c", "egret-proxy")
	}
	// apiLines counts the lines of log naming the API server.
	apiLines := func(log, host string) int {
		c := 0
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, `"`+host+`:`) || strings.Contains(l, "kubernetes.default") {
				c++
			}
		}
		return c
	}
	for _, tc := range []struct{ pod, log string }{{"env", ""}, {"sidecar", "sidecar"}} {
		t.Run(tc.pod, func(t *testing.T) {
			before := egretLog(tc.log)
			out := n.KubectlT(t, "exec", "-n", ns, tc.pod, "-c", "app", "--", "/bin/kubelist")
			lines := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				k, v, _ := strings.Cut(l, " ")
				lines[k] = v
			}
			u, err := url.Parse(lines["host"])
			if err != nil || u.Hostname() == "" {
				t.Fatalf("kubelist: no API server URL:\n%s", out)
			}
			host := u.Hostname()
			if lines["proxy"] != "direct" || !strings.Contains(" "+lines["pods"]+" ", " "+tc.pod+" ") {
				t.Errorf("client-go in the %s pod: want the API server direct and the namespace's pods listed:\n%s", tc.pod, out)
			}
			t.Logf("client-go in the %s pod:\n%s", tc.pod, out)
			// The log is written after the answer: a moment for a line
			// that would be there.
			time.Sleep(2 * time.Second)
			if after := egretLog(tc.log); apiLines(after, host) != apiLines(before, host) {
				t.Errorf("client-go's request to the API server %s passed through egret (%s log):\n%s", host, tc.pod, after[len(before):])
			}
			// The control: NO_PROXY unset, the API server goes to egret.
			n.KubectlCmd(t.Context(), "exec", "-n", ns, tc.pod, "-c", "app", "--", "env", "-u", "NO_PROXY", "-u", "no_proxy", "/bin/kubelist").Run()
			deadline := time.Now().Add(20 * time.Second)
			for {
				log := egretLog(tc.log)
				if apiLines(log, host) != apiLines(before, host) {
					t.Logf("without NO_PROXY, egret's (%s) log: %s", tc.pod, lastLine(log, `"`+host+`:`))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("without NO_PROXY client-go's request to %s left no line in egret's (%s) log: the check above proves nothing", host, tc.pod)
				}
				time.Sleep(time.Second)
			}
		})
	}
	if t.Failed() {
		t.Logf("the pods' NO_PROXY: %s", n.KubectlT(t, "get", "pods", "-n", ns, "-o", "jsonpath={range .items[*]}{.metadata.name}: {.spec.containers[0].env[?(@.name==\"NO_PROXY\")].value}{\"\\n\"}{end}"))
	}
}

// lastLine is the last line of log containing s.
func lastLine(log, s string) string {
	i := strings.LastIndex(log, s)
	if i < 0 {
		return ""
	}
	start := strings.LastIndex(log[:i], "\n") + 1
	line, _, _ := strings.Cut(log[start:], "\n")
	return line
}

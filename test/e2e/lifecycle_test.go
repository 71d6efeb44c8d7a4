package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + testutil.FreePort(t)
}

func echoServer(t *testing.T) string {
	return testutil.TCPServer(t, func(c net.Conn) { io.Copy(c, c) })
}

func tunnelTo(proxy, target string) (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", proxy, time.Second)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT: %s", resp.Status)
	}
	return c, br, nil
}

func echoed(c net.Conn, br *bufio.Reader, s string) bool {
	io.WriteString(c, s)
	buf := make([]byte, len(s))
	_, err := io.ReadFull(br, buf)
	return err == nil && string(buf) == s
}

func readyz(admin string) int {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + admin + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDrainOnSIGTERM: readiness fails at once, new clients are still
// accepted during the drain period, then refused; an open tunnel keeps
// working until it ends; then egret exits 0.
func TestDrainOnSIGTERM(t *testing.T) {
	target := echoServer(t)
	proxyAddr, admin := freeAddr(t), freeAddr(t)
	// The drain period leaves room for a loaded 2-core runner under -race:
	// the late client below must connect inside it.
	const drainPeriod = 3 * time.Second
	cmd := exec.Command(egretBin, "proxy", "--listen", proxyAddr, "--admin-listen", admin, "--drain-period", drainPeriod.String(), "--drain-timeout", "10s")
	var logs testutil.SyncBuffer
	cmd.Stderr = &logs
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("egret log:\n%s", logs.String())
		}
	})
	for readyz(admin) != 200 {
		if time.Since(start) > 10*time.Second {
			t.Fatal("never ready")
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("process start to /readyz 200: %v (includes exec and the first HTTP round trip)", time.Since(start))

	c, br, err := tunnelTo(proxyAddr, target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	sig := time.Now()
	for readyz(admin) != 503 {
		if time.Since(sig) > drainPeriod/2 {
			t.Fatalf("readiness did not fail within %s of SIGTERM", drainPeriod/2)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("SIGTERM to /readyz 503: %v", time.Since(sig))
	// Still accepting during the drain period (endpoints take time to update).
	c2, br2, err := tunnelTo(proxyAddr, target)
	if err != nil {
		t.Fatalf("a new client during the drain period was refused: %v", err)
	}
	if !echoed(c2, br2, "late") {
		t.Error("tunnel opened during the drain period does not work")
	}
	c2.Close()
	if time.Since(sig) >= drainPeriod {
		t.Fatalf("the late client came %v after SIGTERM, past the drain period: the runner is too slow for this test", time.Since(sig))
	}
	// After the period, new connections are refused ...
	time.Sleep(time.Until(sig.Add(drainPeriod)))
	for {
		c3, err := net.DialTimeout("tcp", proxyAddr, time.Second)
		if err != nil {
			break
		}
		c3.Close()
		if time.Since(sig) > drainPeriod+5*time.Second {
			t.Fatalf("still accepting %v after SIGTERM, drain period %s", time.Since(sig), drainPeriod)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("SIGTERM to refusing connections: %v (drain period %s)", time.Since(sig), drainPeriod)
	// ... while the open tunnel keeps working,
	if !echoed(c, br, "still here") {
		t.Error("the open tunnel broke during the drain")
	}
	select {
	case err := <-exited:
		t.Fatalf("egret exited (%v) with a tunnel still open", err)
	default:
	}
	// and when it ends, egret exits 0.
	c.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit: %v, want 0", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("egret did not exit after the last tunnel closed")
	}
	if !strings.Contains(logs.String(), `"msg":"egret proxy stopped"`) {
		t.Errorf("no stop line in the log")
	}
}

// TestBadConfigExits2 checks that invalid configuration is refused with a
// clear message and exit code 2 before anything listens.
func TestBadConfigExits2(t *testing.T) {
	cmd := exec.Command(egretBin, "proxy", "--listen", freeAddr(t))
	cmd.Env = append(os.Environ(), "DIRECT_CIDRS=10.0.0.0/33", "UPSTREAM_PROXY=http://u:hunter2@proxy:3128", "DEFAULT_ROUTE=sideways")
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit = %v, want 2; output:\n%s", err, out)
	}
	for _, want := range []string{`CIDR "10.0.0.0/33"`, "unknown route action"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "hunter2") {
		t.Error("password in the error output")
	}
}

// TestSecondSignalExitsAtOnce: a second SIGINT during the drain ends the
// process at once (Ctrl-C twice), with a tunnel still open and most of the
// drain period left.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	target := echoServer(t)
	proxyAddr, admin := freeAddr(t), freeAddr(t)
	cmd := exec.Command(egretBin, "proxy", "--listen", proxyAddr, "--admin-listen", admin, "--drain-period", "30s", "--drain-timeout", "30s")
	var logs testutil.SyncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("egret log:\n%s", logs.String())
		}
	})
	start := time.Now()
	for readyz(admin) != 200 {
		if time.Since(start) > 10*time.Second {
			t.Fatal("never ready")
		}
		time.Sleep(2 * time.Millisecond)
	}
	c, _, err := tunnelTo(proxyAddr, target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd.Process.Signal(os.Interrupt)
	for readyz(admin) != 503 {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the first SIGINT did not start the drain")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-exited:
		t.Fatalf("exited on the first SIGINT (%v): the drain was skipped", err)
	case <-time.After(200 * time.Millisecond):
	}
	second := time.Now()
	cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 130 {
			t.Errorf("exit %v, want status 130", err)
		}
		t.Logf("second SIGINT to exit: %v", time.Since(second))
	case <-time.After(3 * time.Second):
		t.Fatal("a second SIGINT did not end the drain")
	}
	if !strings.Contains(logs.String(), "second signal: exiting without waiting for the drain") {
		t.Errorf("no log line for the second signal:\n%s", logs.String())
	}
}

package policy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/ratelimit"
	"egret.io/egret/internal/testutil"
)

// waitRedis waits until the Redis server at addr answers PING (+PONG).
func waitRedis(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			if err == nil {
				_, err = io.ReadFull(c, buf)
			}
			c.Close()
			if err == nil && string(buf) == "+PONG\r\n" {
				return
			}
			if err == nil {
				err = fmt.Errorf("answered %q", buf)
			}
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redis-server at %s not ready after 15s: %v", addr, last)
}

// freePort returns a loopback port nobody listens on (for a program that
// takes its port as a setting).
func freePort(t *testing.T) int {
	t.Helper()
	p, _ := strconv.Atoi(testutil.FreePort(t))
	return p
}

// start runs cmd until the test ends (killed by its PID) and returns it.
func start(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), out.String())
		}
	})
	return cmd
}

// rateLimitService starts redis-server and the real envoyproxy/ratelimit
// (built by scripts/deps/50-ratelimit.sh) with the domain egret, and
// returns the service's gRPC address and its process.
func rateLimitService(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	redis := testutil.NeedTool(t, "redis-server")
	mod, err := os.ReadFile("../../tools/ratelimit/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\tgithub.com/envoyproxy/ratelimit (\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("tools/ratelimit/go.mod requires no github.com/envoyproxy/ratelimit")
	}
	bin := filepath.Join(testutil.CacheDir(), "ratelimit", string(m[1]), "ratelimit")
	if _, err := os.Stat(bin); err != nil {
		testutil.Missing(t, bin+" not found (run scripts/deps/50-ratelimit.sh or make test-deps)")
	}

	dir := t.TempDir()
	redisPort := freePort(t)
	start(t, exec.Command(redis, "--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir))
	// envoyproxy/ratelimit panics when Redis refuses its first connection:
	// start it only once Redis answers PING.
	waitRedis(t, "127.0.0.1:"+strconv.Itoa(redisPort))

	cfg := filepath.Join(dir, "runtime", "rl", "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	// The limits travel in each request (descriptor overrides): the
	// service only has to know the domain.
	conf := "domain: " + ratelimit.DefaultDomain + "\ndescriptors:\n- key: " + ratelimit.DescriptorKey + "\n"
	if err := os.WriteFile(filepath.Join(cfg, "egret.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcPort := freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"USE_STATSD=false", "LOG_LEVEL=warn", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:"+strconv.Itoa(redisPort),
		"RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=rl",
		"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(freePort(t)),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(freePort(t)),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort))
	start(t, cmd)
	addr := "127.0.0.1:" + strconv.Itoa(grpcPort)

	// Ready when it answers for the domain (it reads its configuration
	// and connects to Redis first).
	cc, err := ratelimit.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := rls.NewRateLimitServiceClient(cc)
	eventually(t, 30*time.Second, "the rate-limit service answers", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: ratelimit.DefaultDomain,
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: ratelimit.DescriptorKey, Value: "probe"}}}}})
		return err == nil && resp.GetOverallCode() == rls.RateLimitResponse_OK
	})
	return addr, cmd
}

// TestSharedLimitAcrossReplicas: two gateway replicas, each with its own
// engine and pod index, send a workload's hits to the real
// envoyproxy/ratelimit with Redis; the workload's rate holds across both.
// When the service goes away, the fail-open replica lets traffic through
// and the fail-closed one refuses it.
func TestSharedLimitAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and envoyproxy/ratelimit")
	}
	addr, svc := rateLimitService(t)
	port := origin(t)
	names := hosts{"allowed.test": "127.0.0.1"}
	// A fresh namespace name: the service's counters are per workload key
	// and live for the unit (an hour), so a rerun starts from zero.
	ns := fmt.Sprintf("shop-%d", time.Now().UnixNano())
	const limit = 5
	doc := fmt.Sprintf(`
metadata: {name: web, namespace: %s}
spec:
  podSelector: {matchLabels: {app: web}}
  egress:
  - {action: allow, hosts: [allowed.test]}
  limits: {requests: %d, unit: hour}`, ns, limit)
	var p policy.EgressPolicy
	if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	const src = "127.0.3.3"
	replica := func(failClosed bool) *gateway {
		cc, err := ratelimit.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		pods := identity.NewPods()
		pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: types.UID("uid-web"), Labels: map[string]string{"app": "web"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: src}})
		eng := &policy.Engine{Pods: pods, Limiter: &ratelimit.Service{Client: rls.NewRateLimitServiceClient(cc), FailClosed: failClosed, Timeout: time.Second}}
		if c := eng.Set(&p, false); c.Err != nil {
			t.Fatal(c.Err)
		}
		return startGateway(t, eng, names, nil)
	}
	open, closed := replica(false), replica(true)

	through, refused := 0, 0
	for i := range 3 * limit {
		g, kind := open, "http"
		if i%2 == 1 {
			g, kind = closed, "connect"
		}
		switch body, st := g.request(t, kind, src, "allowed.test:"+port, ""); {
		case body == "hello from allowed.test":
			through++
		case st == 429:
			refused++
		default:
			t.Fatalf("request %d: status %d, body %q", i, st, body)
		}
	}
	if through != limit || refused != 2*limit {
		t.Errorf("across two replicas: %d through and %d refused, want %d and %d (the limit is %d an hour for the workload)", through, refused, limit, 2*limit, limit)
	}
	off := open.log.Len()
	open.request(t, "http", src, "allowed.test:"+port, "")
	wantFields(t, open.line(t, off, "http", "allowed.test"), map[string]string{"namespace": ns, "policy": ns + "/web"})

	// The service goes away.
	svc.Process.Kill()
	eventually(t, 10*time.Second, "the service is gone", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if body, st := open.request(t, "http", src, "allowed.test:"+port, ""); body != "hello from allowed.test" {
		t.Errorf("fail-open replica without its service: status %d", st)
	}
	off = closed.log.Len()
	if _, st := closed.request(t, "http", src, "allowed.test:"+port, ""); st != 503 {
		t.Errorf("fail-closed replica without its service: status %d, want 503", st)
	}
	closed.line(t, off, "http", "allowed.test")
}

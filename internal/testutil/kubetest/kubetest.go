package kubetest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/golden"
)

// KubeVersion is the Kubernetes release the cached binaries are built from.
const KubeVersion = "v1.37.2"

// ServiceCIDR is the --service-cluster-ip-range the test API server runs
// with; the server turns it into the default ServiceCIDR object "kubernetes".
const ServiceCIDR = "10.96.0.0/16"

// Cluster is a running test control plane.
type Cluster struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string
	// Clientset is a typed client for Config.
	Clientset kubernetes.Interface

	env *envtest.Environment
	dir string
}

// AssetsDir returns the directory holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS if set, else testutil.CacheDir()/kube/<version>
// ($EGRET_CACHE, else ~/.cache/egret).
func AssetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join(testutil.CacheDir(), "kube", KubeVersion)
}

// missing returns a reason when a binary is absent, else "".
func missing(dir string) string {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Sprintf("%s not found in %s (run scripts/deps/30-kube.sh or make test-deps)", b, dir)
		}
	}
	return ""
}

// Start starts etcd and kube-apiserver from AssetsDir and waits until the
// API server serves. Stop it with Stop.
func Start() (*Cluster, error) {
	dir := AssetsDir()
	if why := missing(dir); why != "" {
		return nil, errMissing(why)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	env.ControlPlane.GetAPIServer().Configure().
		Set("service-cluster-ip-range", ServiceCIDR)
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp("", "egret-kubetest-")
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	kc := filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Cluster{Config: cfg, Kubeconfig: kc, Clientset: cs, env: env, dir: tmp}, nil
}

// Stop stops the API server and etcd and removes their data.
func (c *Cluster) Stop() error {
	if c == nil {
		return nil
	}
	err := c.env.Stop()
	os.RemoveAll(c.dir)
	return err
}

type errMissing string

func (e errMissing) Error() string { return string(e) }

var (
	current  *Cluster
	skipWhy  string
	startErr error
)

// Main starts one API server for the test binary, runs the tests, stops
// it, and returns the exit code for os.Exit. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }
//
// Under -short nothing is started and Require skips.
func Main(m *testing.M) int {
	if !flag.Parsed() {
		flag.Parse() // m.Run parses too; parsing first lets Main see -short
	}
	if testing.Short() {
		skipWhy = "kube-apiserver tests do not run under -short"
		return golden.After(m.Run())
	}
	start := time.Now()
	c, err := Start()
	switch {
	case err == nil:
		current = c
		fmt.Fprintf(os.Stderr, "kubetest: kube-apiserver %s ready in %s\n", KubeVersion, time.Since(start).Round(10*time.Millisecond))
	case isMissing(err):
		skipWhy = err.Error()
	default:
		startErr = err
	}
	code := m.Run()
	if err := current.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "kubetest: stop:", err)
	}
	return golden.After(code)
}

func isMissing(err error) bool {
	_, ok := err.(errMissing)
	return ok
}

// Require returns the shared cluster. It skips the test when the binaries are
// missing (fails under EGRET_REQUIRE_ALL=1) and fails it when the server did
// not start.
func Require(t testing.TB) *Cluster {
	t.Helper()
	if current != nil {
		return current
	}
	if startErr != nil {
		t.Fatalf("kube-apiserver: %v", startErr)
	}
	if skipWhy == "" {
		t.Fatal("kubetest: no cluster; call kubetest.Main from TestMain")
	}
	if os.Getenv("EGRET_REQUIRE_ALL") == "1" && !testing.Short() {
		t.Fatalf("EGRET_REQUIRE_ALL=1: %s", skipWhy)
	}
	t.Skip(skipWhy)
	return nil
}

var nsSeq atomic.Int64

// Namespace creates a namespace with a unique name starting with prefix and
// the given labels. The test API server runs no namespace controller, so it
// is not deleted afterwards; names never repeat within a run.
func (c *Cluster) Namespace(t testing.TB, prefix string, labels map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", strings.TrimSuffix(prefix, "-"), os.Getpid()%100000, nsSeq.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

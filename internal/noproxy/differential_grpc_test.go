//go:build linux

package noproxy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

// The gRPC rows live: grpc-go (one process per environment: net/http reads
// the variables once), grpc-js and gRPC C-core through Python's grpcio (one
// process for every case: both read the environment for each new channel).
// gRPC targets are host:port, so the rows get the wiring sample — the
// variable cases and the NO_PROXY values of wireEntries against every URL —
// and the gRPC variables' own cases (grpcCases), not the whole matrix: a
// channel's set-up and failure cost more than a request.

// grpcCases are the variables only gRPC stacks read, and the entry forms
// their matchers read differently (spaces, case, CIDRs, an empty entry).
func grpcCases() []diffCase {
	lower, upper := diffProxyLower, diffProxyUpper
	envs := []map[string]string{
		{"grpc_proxy": upper},
		{"grpc_proxy": upper, "https_proxy": lower},
		{"grpc_proxy": "", "https_proxy": lower},
		{"GRPC_PROXY": upper},
		{"https_proxy": "", "http_proxy": lower},
		{"https_proxy": "https://127.0.0.1:9"},
		{"HTTPS_PROXY": "https://127.0.0.1:8"},
		{"https_proxy": lower, "no_grpc_proxy": "example.com,10.1.2.3", "no_proxy": "other.com"},
		{"https_proxy": lower, "no_grpc_proxy": "other.com", "no_proxy": "example.com,10.1.2.3"},
		{"https_proxy": lower, "no_grpc_proxy": "", "no_proxy": "example.com,10.1.2.3"},
		{"https_proxy": lower, "NO_GRPC_PROXY": "example.com"},
		{"https_proxy": lower, "no_proxy": "foo.com, example.com, 10.1.2.3"},
		{"https_proxy": lower, "no_proxy": "EXAMPLE.COM,10.1.2.0/24"},
		{"https_proxy": lower, "no_proxy": "xample.com,.2.3"},
		{"https_proxy": lower, "no_proxy": "foo.com,"},
		{"https_proxy": lower, "no_proxy": "10.1.2.3/8,fd00::/8"},
		{"https_proxy": lower, "no_proxy": "0.0.0.0/0"},
		{"https_proxy": lower, "HTTPS_PROXY": upper, "NO_PROXY": "example.com,10.0.0.0/8"},
	}
	var cs []diffCase
	for i, e := range envs {
		env := diffEnvBase()
		for k, v := range e {
			env[k] = v
		}
		for j, u := range []string{"http://example.com/", "https://www.example.com/", "http://10.1.2.3/", "https://10.1.2.3:8080/"} {
			cs = append(cs, diffCase{ID: fmt.Sprintf("g%02d-u%02d", i, j), Env: env, URL: u, Wire: true})
		}
	}
	return filterCases(cs)
}

func TestDifferentialGRPC(t *testing.T) {
	skipShort(t)
	cases := append(wired(diffCases(t)), grpcCases()...)
	w := newWorld(t, cases)
	l := newLedger(t, "grpc-go", "grpc-js", "grpc-core")
	dir := filepath.Join(cacheDir(t), "noproxy-grpc")
	for _, v := range []string{"1.74.2", "1.85.0"} {
		t.Run("grpc-go-"+v, func(t *testing.T) {
			bin := filepath.Join(dir, "grpcgo-"+v)
			if _, err := os.Stat(bin); err != nil {
				testutil.Missing(t, bin+" is not built (scripts/deps/29-grpc.sh)")
			}
			start := time.Now()
			got, version := w.perProcess(t, "grpc-go "+v, []string{bin}, nil, "", cases)
			l.judge(t, liveRun{family: "grpc-go", version: version, got: got, cases: cases, wall: time.Since(start)})
		})
	}
	node := grpcNode(t)
	for _, v := range []string{"1.10.0", "1.12.6", "1.13.0", "1.14.7"} {
		t.Run("grpc-js-"+v, func(t *testing.T) {
			pkg := filepath.Join(dir, "node_modules", "grpc-js-"+v)
			if _, err := os.Stat(pkg); err != nil {
				testutil.Missing(t, pkg+" is not installed (scripts/deps/29-grpc.sh)")
			}
			start := time.Now()
			cr := &clientRun{name: "grpc-js " + v, argv: []string{node, "grpc.js", pkg}, dir: clientsDir(t)}
			got := w.run(t, cr, cases)
			l.judge(t, liveRun{family: "grpc-js", version: cr.version, got: got, cases: cases, wall: time.Since(start)})
		})
	}
	t.Run("grpc-core-python3-grpcio", func(t *testing.T) {
		if exec.Command("/usr/bin/python3", "-c", "import grpc").Run() != nil {
			testutil.Missing(t, "python3-grpcio is not installed (scripts/deps/29-grpc.sh)")
		}
		start := time.Now()
		cr := &clientRun{name: "grpcio", argv: []string{"/usr/bin/python3", "grpc_core.py"}, dir: clientsDir(t)}
		got := w.run(t, cr, cases)
		l.judge(t, liveRun{family: "grpc-core", version: cr.version, got: got, cases: cases, wall: time.Since(start)})
	})
	l.check()
}

// grpcNode is the Node that runs grpc-js: the newest Node 24 that
// scripts/deps/20-npm.sh installed, else the one on PATH.
func grpcNode(t *testing.T) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(cacheDir(t), "noproxy-clients", "node_modules", "node-24.*", "bin", "node"))
	best, bestV := "", ""
	for _, p := range m {
		v := strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(p))), "node-")
		if best == "" || compareVersions(v, bestV) > 0 {
			best, bestV = p, v
		}
	}
	if best != "" {
		return best
	}
	p, err := exec.LookPath("node")
	if err != nil {
		testutil.Missing(t, "no node (scripts/deps/20-npm.sh)")
	}
	return p
}

// Package realnode runs a real single-node Kubernetes cluster for a test
// binary: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet and kube-proxy (k8s.io/kubernetes v1.37.2, scripts/deps/30-kube.sh
// and 31-node.sh), Debian's containerd 1.6 + runc + CNI bridge, and CoreDNS,
// with images the harness builds itself (pause, a busybox client image with
// a Go HTTP client, egret's own images from deploy/image) imported with ctr.
// Nothing is pulled from outside.
//
// One node per test binary: call Main from TestMain, Get from each test.
// Bring-up is paid once (seconds once the binaries are cached).
//
// Host side: the node owns bridge egretnode0 (10.88.0.1/16: the node IP, the
// API server's address), iptables chain EGRET-NODE (FORWARD: nothing leaves
// the bridge except to interfaces a test allows), kube-proxy's rules (iptables
// mode, node ports only on 10.88.0.1), net.ipv4.ip_forward and
// the sysctls the kubelet sets at start. Stop (and a later Start, after a
// crash) undoes all of it: it is safe to run twice. A machine-wide lock
// (/run/egret-realnode.lock) keeps two test binaries from running a node at
// once.
//
// Host requirements: root with NET_ADMIN, bridge and veth, overlayfs,
// writable cgroups (v1 or v2), iptables. Without them, or without the
// binaries, Get skips the test (testutil.Missing: fails under
// EGRET_REQUIRE_ALL=1).
package realnode

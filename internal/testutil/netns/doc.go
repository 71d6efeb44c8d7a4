// Package netns gives tests throwaway Linux network namespaces: pod-like hosts
// joined by veth pairs with private addresses the test assigns, commands run
// inside them (optionally as another UID/GID), and sockets opened inside them
// from the test process itself.
//
// Every namespace and interface name carries the process id and a random
// suffix, so developers running tests at the same time on one machine never
// collide; namespaces are deleted in t.Cleanup, which also removes their veth
// ends. The harness needs root and the ip tool (iproute2); Require skips the
// test without them, or fails it when EGRET_REQUIRE_ALL=1 (CI).
//
// A typical test:
//
//	pod, outside := netns.New(t, "pod"), netns.New(t, "outside")
//	netns.Link(t, pod, outside, []string{"10.250.0.1/24"}, []string{"10.250.0.2/24"})
//	ln, _ := outside.Listen("tcp", "10.250.0.2:0")         // a server "outside"
//	out, _ := pod.CommandAs(ctx, 1000, 1000, "curl", url).Output() // a client in the pod as UID 1000
//
// Imported only by tests.
package netns

// Package kubenode configures and checks the proxy settings of a node's image
// pullers: containerd, CRI-O, the Docker daemon and the kubelet. These are Go
// programs that read HTTP_PROXY, HTTPS_PROXY and NO_PROXY once, at start,
// from their own environment (a systemd drop-in), not from any pod's; an
// internal registry missing from their NO_PROXY is why ImagePullBackOff
// survives a perfect Deployment.
//
// Render builds the systemd drop-in (noproxy.RenderDropIn: `[Service]` +
// `Environment=` lines in both cases, the registries added to NO_PROXY; with
// credentials an `EnvironmentFile=` of mode 0600 instead, so that
// `systemctl show` does not print the password) and the reload/restart steps.
//
// Inspect reads a running process's real environment (/proc/PID/environ),
// finds the process by name when asked, tells per registry host whether the
// process would go direct or through a proxy (noproxy's go client model:
// Go's net/http rules, as containerd, dockerd and the kubelet apply them),
// and compares the live
// environment with what the unit files and drop-ins configure, to catch a
// drop-in edited but not applied by a restart.
package kubenode

package kubenode

import (
	"fmt"
	"sort"
	"strings"
)

// Runtime is a node daemon whose proxy settings egret manages.
type Runtime string

// The supported runtimes.
const (
	Containerd Runtime = "containerd"
	CRIO       Runtime = "crio"
	Docker     Runtime = "docker"
	Kubelet    Runtime = "kubelet"
)

// runtimeInfo is what egret knows about a runtime.
type runtimeInfo struct {
	unit    string // systemd unit name without ".service"
	process string // process name under /proc
	note    string // what a restart does, for the steps
}

var runtimes = map[Runtime]runtimeInfo{
	Containerd: {unit: "containerd", process: "containerd", note: "running containers keep running (their shims survive the restart)"},
	CRIO:       {unit: "crio", process: "crio", note: "running containers keep running (conmon survives the restart)"},
	Docker:     {unit: "docker", process: "dockerd", note: "containers are restarted unless \"live-restore\": true is set in /etc/docker/daemon.json"},
	Kubelet:    {unit: "kubelet", process: "kubelet", note: "pods keep running; the kubelet also talks to the API server, so its NO_PROXY must hold the API server's name and address (images are pulled by the container runtime: render its drop-in too)"},
}

// ParseRuntime reads a runtime name.
func ParseRuntime(s string) (Runtime, error) {
	r := Runtime(strings.ToLower(strings.TrimSpace(s)))
	if r == "cri-o" {
		r = CRIO
	}
	if _, ok := runtimes[r]; !ok {
		return "", fmt.Errorf("unknown runtime %q (want %s)", s, strings.Join(RuntimeNames(), ", "))
	}
	return r, nil
}

// RuntimeNames lists the supported runtimes.
func RuntimeNames() []string {
	var out []string
	for r := range runtimes {
		out = append(out, string(r))
	}
	sort.Strings(out)
	return out
}

// Unit returns the systemd unit of r ("containerd.service").
func (r Runtime) Unit() string { return runtimes[r].unit + ".service" }

// Process returns the process name of r ("dockerd" for docker).
func (r Runtime) Process() string { return runtimes[r].process }

// RestartSteps returns the commands that apply a changed drop-in.
func (r Runtime) RestartSteps() []string {
	u := runtimes[r].unit
	return []string{"systemctl daemon-reload", "systemctl restart " + u}
}

// RestartNote says what a restart of r does to running workloads.
func (r Runtime) RestartNote() string { return runtimes[r].note }

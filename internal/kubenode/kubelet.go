package kubenode

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
)

// Cmdline returns a process's arguments.
func (p Proc) Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(p.root(), strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("read the command line of pid %d: %w", pid, err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// flagValue returns the value of flag name (without dashes) in args:
// --name=V, -name=V, --name V or -name V; ok is false when absent.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		f, ok := strings.CutPrefix(a, "--")
		if !ok {
			if f, ok = strings.CutPrefix(a, "-"); !ok {
				continue
			}
		}
		if f == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// KubeletAPIServer returns the API server URL a kubelet talks to: the
// server of its --kubeconfig's current context (or of its only cluster),
// read through /proc/PID/root (so a debug pod sees the node's file) and,
// for a relative path, /proc/PID/cwd. kubeconfig is "" for a kubelet
// without --kubeconfig (standalone: it talks to no API server).
func (p Proc) KubeletAPIServer(pid int) (server, kubeconfig string, err error) {
	args, err := p.Cmdline(pid)
	if err != nil {
		return "", "", err
	}
	kubeconfig, ok := flagValue(args[1:], "kubeconfig")
	if !ok || kubeconfig == "" {
		return "", "", nil
	}
	file := filepath.Join(p.root(), strconv.Itoa(pid), "root", kubeconfig)
	if !filepath.IsAbs(kubeconfig) {
		file = filepath.Join(p.root(), strconv.Itoa(pid), "cwd", kubeconfig)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", kubeconfig, fmt.Errorf("read the kubelet's kubeconfig %s: %w", kubeconfig, err)
	}
	cfg, err := clientcmd.Load(bytes.TrimSpace(b))
	if err != nil {
		return "", kubeconfig, fmt.Errorf("the kubelet's kubeconfig %s: %w", kubeconfig, err)
	}
	cluster := ""
	if c, ok := cfg.Contexts[cfg.CurrentContext]; ok {
		cluster = c.Cluster
	} else if len(cfg.Clusters) == 1 {
		for name := range cfg.Clusters {
			cluster = name
		}
	}
	c, ok := cfg.Clusters[cluster]
	if !ok || c.Server == "" {
		return "", kubeconfig, fmt.Errorf("the kubelet's kubeconfig %s names no server for its current context %q", kubeconfig, cfg.CurrentContext)
	}
	return c.Server, kubeconfig, nil
}

// checkKubeletAPIServer adds the kubelet's route to its API server to r:
// it must be direct (through the proxy the node's status and its pods'
// updates depend on the proxy, and a proxy that refuses the API server's
// address makes the node NotReady). An API server that cannot be found is
// a problem too: the route is unchecked.
func checkKubeletAPIServer(r *Report, p Proc, env map[string]string, restart string) {
	server, kubeconfig, err := p.KubeletAPIServer(r.PID)
	if err != nil {
		r.Problems = append(r.Problems, err.Error()+": the route to the API server is unchecked")
		return
	}
	if kubeconfig == "" {
		return
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		r.Problems = append(r.Problems, fmt.Sprintf("the kubelet's kubeconfig %s: server %q is not a URL: the route to the API server is unchecked", kubeconfig, server))
		return
	}
	d := decideURL((&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}).String(), env)
	d.Registry = server
	if !d.OK {
		d.Advice = fmt.Sprintf("add %s to NO_PROXY and no_proxy in the kubelet's drop-in, then %s", u.Hostname(), restart)
		if d.Decision == "error" {
			d.Advice = "check the server of " + kubeconfig + " and the proxy variables in the drop-in, then " + restart
		}
		r.Problems = append(r.Problems, fmt.Sprintf("the kubelet's API server %s (%s): %s — %s", server, kubeconfig, d.Reason, d.Advice))
	}
	r.APIServer = &d
}

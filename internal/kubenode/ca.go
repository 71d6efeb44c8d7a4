package kubenode

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"egret.io/egret/internal/trust"
)

// DefaultRegistry stands for every registry (containerd's _default host
// namespace).
const DefaultRegistry = "_default"

// Where each runtime reads per-registry CA files.
const (
	ContainerdCertsDir = "/etc/containerd/certs.d"
	CRIOCertsDir       = "/etc/containers/certs.d"
	DockerCertsDir     = "/etc/docker/certs.d"
	// ContainerdConfig is containerd's configuration, whose registry
	// config_path must name ContainerdCertsDir for hosts.toml to count.
	ContainerdConfig = "/etc/containerd/config.toml"
)

// CAOptions are the inputs of RenderCA.
type CAOptions struct {
	Runtime Runtime
	// CA is the PEM of the CAs to trust (the corporate proxy's CA, or an
	// internal registry's).
	CA []byte
	// Registries are host or host:port; DefaultRegistry means every
	// registry (containerd only).
	Registries []string
}

// CARendered is the result of RenderCA.
type CARendered struct {
	Files []File
	Steps []string // what to run after installing the files
	Note  string   // whether the runtime needs a restart
}

// RenderCA builds the files that make a runtime trust o.CA when it pulls
// from o.Registries: containerd's hosts.toml with `ca` plus the CA file,
// CRI-O's and Docker's certs.d/<registry>/ca.crt.
func RenderCA(o CAOptions) (*CARendered, error) {
	certs, err := trust.ParsePEM(o.CA)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	if len(o.Registries) == 0 {
		return nil, errors.New("name the registries (--registry HOST[:PORT], or _default for every registry with containerd)")
	}
	pemData := (&trust.Bundle{Certs: certs}).PEM()
	r := &CARendered{}
	for _, reg := range o.Registries {
		dir, err := registryDir(reg)
		if err != nil {
			return nil, err
		}
		switch o.Runtime {
		case Containerd:
			base := path.Join(ContainerdCertsDir, dir)
			ca := path.Join(base, "ca.crt")
			var b strings.Builder
			fmt.Fprintf(&b, "# Written by egret: trust %s for %s. containerd reads this file at every pull.\n", strings.Join(trust.Names(certs), ", "), reg)
			if dir != DefaultRegistry {
				fmt.Fprintf(&b, "server = %q\n", serverFor(dir))
			}
			fmt.Fprintf(&b, "ca = %q\n", ca)
			r.Files = append(r.Files, File{Path: ca, Content: string(pemData), Mode: 0o644},
				File{Path: path.Join(base, "hosts.toml"), Content: b.String(), Mode: 0o644})
		case CRIO, Docker:
			if dir == DefaultRegistry {
				return nil, fmt.Errorf("%s has no default registry directory: list the registries, or add the CA to the node's trust store (see docs/trust.md)", o.Runtime)
			}
			root := CRIOCertsDir
			if o.Runtime == Docker {
				root = DockerCertsDir
			}
			r.Files = append(r.Files, File{Path: path.Join(root, dir, "ca.crt"), Content: string(pemData), Mode: 0o644})
		default:
			return nil, fmt.Errorf("%s does not pull images: render the CA for containerd, crio or docker", o.Runtime)
		}
	}
	switch o.Runtime {
	case Containerd:
		r.Steps = []string{
			"grep -q 'config_path *= *\"" + ContainerdCertsDir + "\"' " + ContainerdConfig + " || echo 'set config_path = \"" + ContainerdCertsDir + "\" under [plugins.\"io.containerd.cri.v1.images\".registry] (containerd 2.x) or [plugins.\"io.containerd.grpc.v1.cri\".registry] (1.x) in " + ContainerdConfig + ", then: systemctl restart containerd'",
		}
		r.Note = "hosts.toml and its ca are read at every pull: no restart, once config_path names " + ContainerdCertsDir + " (setting it needs one restart)"
	case CRIO:
		r.Note = "CRI-O (containers/image) reads certs.d at every pull: no restart"
	case Docker:
		r.Note = "dockerd reads certs.d when it connects to the registry: no restart; on Linux the CA is added to the system roots"
	}
	return r, nil
}

// registryDir is the directory name of a registry: host or host:port as
// the runtimes look it up ("registry.corp:5000", "[fd00::5]:5000").
func registryDir(reg string) (string, error) {
	s := strings.TrimSpace(reg)
	if s == DefaultRegistry {
		return s, nil
	}
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	s = strings.TrimSuffix(strings.SplitN(s, "/", 2)[0], "/")
	if !registryRE.MatchString(s) {
		return "", fmt.Errorf("registry %q is not a host or host:port", reg)
	}
	return strings.ToLower(s), nil
}

var registryRE = regexp.MustCompile(`^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)(:[0-9]{1,5})?$`)

// serverFor is containerd's server URL for a registry namespace.
func serverFor(dir string) string {
	if dir == "docker.io" {
		return "https://registry-1.docker.io"
	}
	return "https://" + dir
}

// CACheck is one registry's CA configuration as found on the node.
type CACheck struct {
	Registry string   `json:"registry"`
	Files    []string `json:"files"`
	CAs      []string `json:"cas"` // the certificates' names
	OK       bool     `json:"ok"`
	Problem  string   `json:"problem,omitempty"`
}

// InspectCA reads, under root ("" for /), the CA files runtime r would use
// for each registry and reports what is missing or broken. want, when
// given, is the PEM that must be among them.
func InspectCA(r Runtime, root string, registries []string, want []byte) ([]CACheck, error) {
	var wantCerts []string
	if len(want) > 0 {
		cs, err := trust.ParsePEM(want)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		wantCerts = trust.Names(cs)
	}
	read := func(p string) ([]byte, error) { return os.ReadFile(filepath.Join(root, p)) }
	var out []CACheck
	for _, reg := range registries {
		dir, err := registryDir(reg)
		if err != nil {
			return nil, err
		}
		c := CACheck{Registry: reg}
		var caFile string
		switch r {
		case Containerd:
			cfg, _ := read(ContainerdConfig)
			if !strings.Contains(string(cfg), ContainerdCertsDir) {
				c.Problem = ContainerdConfig + " does not set config_path = \"" + ContainerdCertsDir + "\": hosts.toml files are ignored (set it and restart containerd)"
				out = append(out, c)
				continue
			}
			hosts := path.Join(ContainerdCertsDir, dir, "hosts.toml")
			h, err := read(hosts)
			if err != nil {
				if dir != DefaultRegistry {
					if d, err2 := read(path.Join(ContainerdCertsDir, DefaultRegistry, "hosts.toml")); err2 == nil {
						hosts, h, err = path.Join(ContainerdCertsDir, DefaultRegistry, "hosts.toml"), d, nil
					}
				}
				if err != nil {
					c.Problem = "no " + hosts + ": egret node render --runtime containerd --ca-file CA --registry " + reg
					out = append(out, c)
					continue
				}
			}
			c.Files = append(c.Files, hosts)
			m := caLineRE.FindStringSubmatch(string(h))
			if m == nil {
				c.Problem = hosts + " has no ca = \"...\" line"
				out = append(out, c)
				continue
			}
			caFile = m[1]
			if !path.IsAbs(caFile) {
				caFile = path.Join(path.Dir(hosts), caFile)
			}
		case CRIO:
			caFile = path.Join(CRIOCertsDir, dir, "ca.crt")
		case Docker:
			caFile = path.Join(DockerCertsDir, dir, "ca.crt")
		default:
			return nil, fmt.Errorf("%s does not pull images", r)
		}
		c.Files = append(c.Files, caFile)
		data, err := read(caFile)
		if err != nil {
			c.Problem = "cannot read " + caFile + ": " + errors.Unwrap(err).Error()
			out = append(out, c)
			continue
		}
		certs, err := trust.ParsePEM(data)
		if err != nil {
			c.Problem = caFile + ": " + err.Error()
			out = append(out, c)
			continue
		}
		c.CAs = trust.Names(certs)
		c.OK = true
		for _, w := range wantCerts {
			found := false
			for _, h := range c.CAs {
				found = found || h == w
			}
			if !found {
				c.OK = false
				c.Problem = caFile + " lacks " + w
			}
		}
		out = append(out, c)
	}
	return out, nil
}

var caLineRE = regexp.MustCompile(`(?m)^\s*ca\s*=\s*"([^"]+)"`)

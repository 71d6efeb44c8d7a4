package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/kubenode"
)

// Exit codes of `egret node`.
const (
	nodeExitProblem = 1 // check: a registry would be proxied, the drop-in is not applied, or no proxy when expected
	nodeExitUsage   = 2 // bad flags, process not found, environment unreadable
)

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Render and check the proxy settings of containerd, CRI-O, Docker and the kubelet",
		Long: `The container runtime and the kubelet pull images with their own environment,
set by a systemd drop-in, not with the pod's. node render writes that drop-in
(both cases, the internal registries in NO_PROXY); node check reads a running
daemon's real environment and says what it does for each registry.`,
	}
	cmd.AddCommand(newNodeRenderCmd(), newNodeCheckCmd())
	return cmd
}

func nodeUsageErr(err error) error { return &ExitError{Code: nodeExitUsage, Err: err} }

func newNodeRenderCmd() *cobra.Command {
	var (
		rt, proxy, proxyFile, outDir, output string
		noProxy, registries                  []string
		caFile                               string
	)
	cmd := &cobra.Command{
		Use:   "render --runtime containerd|crio|docker|kubelet --proxy URL [--no-proxy LIST] [--registry HOST]... [--write-dir DIR] [-o text|json]",
		Short: "Write the systemd drop-in that gives a runtime its proxy settings",
		Long: `render writes the systemd drop-in /etc/systemd/system/<unit>.service.d/http-proxy.conf
for the runtime: HTTP_PROXY, HTTPS_PROXY and NO_PROXY in both cases, with
localhost, 127.0.0.1, ::1, the --no-proxy entries and every --registry host in
NO_PROXY (the drop-in of egret noproxy render). Without --write-dir the
drop-in goes to stdout and the steps to stderr; with --write-dir DIR it is
written to DIR/<unit>.service.d/ (use --write-dir /etc/systemd/system on the
node) and the steps go to stdout. -o json prints the result as JSON (unit,
files, NO_PROXY, steps) instead; a file holding credentials is never printed.

When the proxy URL carries a user name and password (or a %, \ or "), the
variables go to an EnvironmentFile (http-proxy.env, mode 0600, written only
with --write-dir) so that systemctl show does not print them; pass such a URL with --proxy-file rather
than on the command line, where ps shows it.

Exit status: 0 rendered, 1 the files could not be written, 2 bad flags.`,
		Example: `  egret node render --runtime containerd --proxy http://proxy.corp:3128 \
      --no-proxy .corp.example,10.0.0.0/8 --registry registry.internal:5000 --write-dir /etc/systemd/system
  egret node render --runtime kubelet --proxy-file /run/secrets/proxy-url \
      --no-proxy api.corp.example,10.0.0.10,10.244.0.0/16,10.96.0.0/12 --write-dir /etc/systemd/system`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "text", "json":
			default:
				if strings.ContainsRune(output, '/') || isDir(output) {
					return nodeUsageErr(fmt.Errorf("-o is the output format (text or json), as everywhere in egret: write the files with --write-dir %s", output))
				}
				return nodeUsageErr(fmt.Errorf("unknown output format %q (want text or json)", output))
			}
			r, err := kubenode.ParseRuntime(rt)
			if err != nil {
				return nodeUsageErr(err)
			}
			if caFile != "" && proxy == "" && proxyFile == "" {
				return renderNodeCA(cmd, r, caFile, registries, outDir)
			}
			if (proxy == "") == (proxyFile == "") {
				return nodeUsageErr(errors.New("give exactly one of --proxy and --proxy-file (or only --ca-file)"))
			}
			if proxyFile != "" {
				b, err := readSmallFile(proxyFile, cmd.InOrStdin())
				if err != nil {
					return nodeUsageErr(fmt.Errorf("--proxy-file: %w", err))
				}
				proxy = strings.TrimSpace(string(b))
			} else if strings.Contains(proxy, "@") {
				fmt.Fprintln(cmd.ErrOrStderr(), "egret: warning: the --proxy URL carries credentials, which ps shows to every user; prefer --proxy-file")
			}
			out, err := kubenode.Render(kubenode.RenderOptions{Runtime: r, Proxy: proxy, NoProxy: noProxy, Registries: registries})
			if err != nil {
				return nodeUsageErr(err)
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			steps := fmt.Sprintf("then run: %s\nnote: %s\n", strings.Join(out.Steps, " && "), out.Note)
			var written []string
			if outDir != "" {
				files := []kubenode.File{out.DropIn}
				if out.EnvFile != nil {
					files = append(files, *out.EnvFile)
				}
				for _, f := range files {
					p := filepath.Join(outDir, filepath.Base(filepath.Dir(f.Path)), filepath.Base(f.Path))
					if err := writeFileMode(p, f.Content, os.FileMode(f.Mode)); err != nil {
						return &ExitError{Code: 1, Err: err}
					}
					written = append(written, p)
				}
			}
			if output == "json" {
				return writeJSON(stdout, nodeRenderJSON(out, written))
			}
			if outDir == "" {
				fmt.Fprint(stdout, out.DropIn.Content)
				if out.EnvFile != nil {
					fmt.Fprintf(stderr, "egret: the proxy URL has credentials: %s (mode 0600) is written only with --write-dir DIR\n", out.EnvFile.Path)
				}
				fmt.Fprintf(stderr, "egret: install as %s, %s", out.DropIn.Path, steps)
				if caFile != "" {
					return renderNodeCA(cmd, r, caFile, registries, "")
				}
				return nil
			}
			for _, p := range written {
				fmt.Fprintf(stdout, "wrote %s\n", p)
			}
			fmt.Fprint(stdout, steps)
			if caFile != "" {
				// --write-dir is the drop-in directory here, not the node's
				// root: print the CA files.
				return renderNodeCA(cmd, r, caFile, registries, "")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&caFile, "ca-file", "", "PEM of the CA the runtime must trust for the --registry hosts (_default: every registry, containerd): hosts.toml + ca.crt, or certs.d/<registry>/ca.crt; alone, --write-dir is the node's root (/)")
	f.StringVar(&rt, "runtime", "", "containerd, crio, docker or kubelet (required)")
	f.StringVar(&proxy, "proxy", "", "proxy URL for http and https (http://host:port)")
	f.StringVar(&proxyFile, "proxy-file", "", "read the proxy URL from this file (- for stdin); use it for URLs with credentials")
	f.StringSliceVar(&noProxy, "no-proxy", nil, "NO_PROXY entries (comma-separated, repeatable); localhost,127.0.0.1,::1 are always added")
	f.StringSliceVar(&registries, "registry", nil, "internal registry host or host:port to reach directly (repeatable)")
	f.StringVar(&outDir, "write-dir", "", "write the files under DIR/<unit>.service.d/ instead of printing the drop-in (/etc/systemd/system on the node)")
	f.StringVar(&outDir, "output-dir", "", "old name of --write-dir")
	f.MarkDeprecated("output-dir", "use --write-dir (-o is the output format)")
	f.StringVarP(&output, "output", "o", "text", "output format: text (the drop-in) or json")
	return cmd
}

// nodeRenderJSON is `node render -o json`: what was rendered, without the
// content of a file that holds credentials.
func nodeRenderJSON(r *kubenode.Rendered, written []string) any {
	type file struct {
		Path    string `json:"path"`
		Mode    string `json:"mode"`
		Content string `json:"content,omitempty"`
		Secret  bool   `json:"secret,omitempty"`
	}
	files := []file{{Path: r.DropIn.Path, Mode: fmt.Sprintf("%04o", r.DropIn.Mode), Content: r.DropIn.Content}}
	if r.EnvFile != nil {
		files = append(files, file{Path: r.EnvFile.Path, Mode: fmt.Sprintf("%04o", r.EnvFile.Mode), Secret: true})
	}
	if written == nil {
		written = []string{}
	}
	return struct {
		Unit    string   `json:"unit"`
		NoProxy string   `json:"noProxy"`
		Files   []file   `json:"files"`
		Written []string `json:"written"`
		Steps   []string `json:"steps"`
		Note    string   `json:"note"`
	}{r.Unit, r.NoProxy, files, written, r.Steps, r.Note}
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func newNodeCheckCmd() *cobra.Command {
	var (
		pid                    int
		rt, process, unit, out string
		registries, unitDirs   []string
		expectProxy            bool
		caFile, caRoot         string
	)
	cmd := &cobra.Command{
		Use:   "check [--pid PID | --runtime NAME | --process NAME] --registry HOST ...",
		Short: "Read a running runtime's real environment and check its registries",
		Long: `check reads the environment a running runtime really has (/proc/PID/environ:
what it read at start, whatever the drop-ins say now), finding the process by
name with --runtime (containerd, crio, dockerd, kubelet) or --process. For
every --registry it says what the daemon does with https://HOST/v2/ under Go's
net/http rules (containerd, dockerd and the kubelet are Go programs): direct,
or through which proxy. It compares the live proxy variables with those the
systemd unit and its drop-ins configure, to catch a drop-in edited but not
applied by a restart.

Exit status: 0 every registry is reached directly and the live environment
matches the unit; 1 a registry would go through the proxy, the live
environment differs from the unit's, an EnvironmentFile is missing, or (with
--expect-proxy) no proxy is set; 2 bad flags, no such process, or an
environment that cannot be read (run as root).`,
		Example: `  egret node check --runtime containerd --registry registry.internal:5000
  egret node check --pid 1234 --unit containerd.service --registry 10.0.0.5:5000 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out != "text" && out != "json" {
				return nodeUsageErr(fmt.Errorf("unknown output format %q (want text or json)", out))
			}
			o := kubenode.InspectOptions{PID: pid, Process: process, Unit: unit, Registries: registries, ExpectProxy: expectProxy}
			if len(unitDirs) > 0 {
				o.UnitDirs = unitDirs
			}
			if rt != "" {
				r, err := kubenode.ParseRuntime(rt)
				if err != nil {
					return nodeUsageErr(err)
				}
				o.Runtime = r
				if o.Process == "" {
					o.Process = r.Process()
				}
			}
			if caFile != "" {
				return checkNodeCA(cmd, o.Runtime, caFile, caRoot, registries, out)
			}
			if pid == 0 && o.Process == "" {
				return nodeUsageErr(errors.New("give --pid, --runtime or --process"))
			}
			for _, reg := range registries {
				if strings.TrimSpace(reg) == "" {
					return nodeUsageErr(errors.New("--registry: empty host"))
				}
			}
			rep, err := kubenode.Inspect(o)
			if err != nil {
				return nodeUsageErr(err)
			}
			if out == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				writeNodeReport(cmd.OutOrStdout(), rep)
			}
			if !rep.OK() {
				return &ExitError{Code: nodeExitProblem}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&pid, "pid", 0, "process to inspect")
	f.StringVar(&rt, "runtime", "", "containerd, crio, docker or kubelet: find its process and unit")
	f.StringVar(&process, "process", "", "find the process by this name instead (e.g. k3s)")
	f.StringVar(&unit, "unit", "", "systemd unit to compare with (default: the runtime's, or <process>.service)")
	f.StringSliceVar(&registries, "registry", nil, "internal registry host or host:port that must be reached directly (repeatable)")
	f.BoolVar(&expectProxy, "expect-proxy", false, "fail when the process has no HTTP_PROXY/HTTPS_PROXY")
	f.StringSliceVar(&unitDirs, "unit-dir", nil, "systemd unit directories to read, highest precedence first (default: the systemd search path)")
	f.StringVarP(&out, "output", "o", "text", "output format: text or json")
	f.StringVar(&caFile, "ca-file", "", "check instead that --runtime trusts this CA (PEM) for every --registry (hosts.toml / certs.d)")
	f.StringVar(&caRoot, "ca-root", "/", "the node's root file system (for --ca-file; e.g. /host in a debug pod)")
	return cmd
}

func writeNodeReport(w io.Writer, r *kubenode.Report) {
	started := ""
	if !r.Started.IsZero() {
		started = ", started " + r.Started.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "%s (pid %d%s)\n", r.Process, r.PID, started)
	fmt.Fprintf(w, "environment (/proc/%d/environ):\n", r.PID)
	n := 0
	for _, name := range kubenode.ProxyVars {
		if v, ok := r.Env[name]; ok {
			fmt.Fprintf(w, "  %s=%s\n", name, v)
			n++
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "  no proxy variables: every pull goes direct")
	}
	decision := func(d kubenode.Decision) {
		mark := "ok  "
		if !d.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s: %s (%s)\n", mark, d.Registry, d.Decision, d.Reason)
		if d.Advice != "" {
			fmt.Fprintf(w, "       %s\n", d.Advice)
		}
	}
	if len(r.Decisions) > 0 {
		fmt.Fprintln(w, "registries:")
		for _, d := range r.Decisions {
			decision(d)
		}
	}
	if r.APIServer != nil {
		fmt.Fprintln(w, "API server (the kubelet's kubeconfig):")
		decision(*r.APIServer)
	}
	if r.Unit != "" {
		if len(r.UnitFiles) == 0 {
			fmt.Fprintf(w, "unit %s: no unit file or drop-in found\n", r.Unit)
		} else {
			fmt.Fprintf(w, "unit %s: %s\n", r.Unit, strings.Join(r.UnitFiles, ", "))
			show := func(v string, set bool) string {
				if !set {
					return "(unset)"
				}
				return fmt.Sprintf("%q", v)
			}
			for _, d := range r.Drift {
				fmt.Fprintf(w, "  %s: live %s, configured %s\n", d.Name, show(d.Live, d.LiveSet), show(d.Configured, d.ConfiguredSet))
			}
			if r.ChangedAfterStart != "" {
				fmt.Fprintf(w, "  %s changed after the process started\n", r.ChangedAfterStart)
			}
		}
	}
	if r.OK() {
		fmt.Fprintln(w, "result: ok")
		return
	}
	fmt.Fprintf(w, "result: %d problem(s)\n", len(r.Problems))
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}

// readSmallFile reads a file of at most 64 KiB ("-" is stdin).
func readSmallFile(name string, stdin io.Reader) ([]byte, error) {
	var r io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, 64<<10+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 64<<10 {
		return nil, errors.New("file larger than 64 KiB")
	}
	return b, nil
}

// writeFileMode writes content to path (creating its directory) with mode,
// replacing the file atomically.
func writeFileMode(path, content string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".egret-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/noproxy"
)

// Exit codes of egret noproxy lint.
const (
	noproxyExitFindings = 1 // at least one error finding
	noproxyExitUsage    = 2 // bad arguments
)

func newNoproxyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "noproxy",
		Short: "How each client runtime reads NO_PROXY and the *_PROXY variables: explain, lint, render",
	}
	cmd.AddCommand(newNoproxyExplainCmd(), newNoproxyLintCmd(), newNoproxyRenderCmd(), newNoproxyClientsCmd())
	cmd.AddCommand(newNoproxyDiscoverCmd())
	return cmd
}

func usageErr(format string, args ...any) error {
	return &ExitError{Code: noproxyExitUsage, Err: fmt.Errorf(format, args...)}
}

func newNoproxyExplainCmd() *cobra.Command {
	var envs, clients []string
	var output string
	cmd := &cobra.Command{
		Use:   "explain URL",
		Short: "Predict, per client runtime, whether a request to URL goes direct, through a proxy, or fails",
		Long: "explain predicts what each client runtime does with URL given a process environment:\n" +
			"egret's own environment by default, or with --env exactly the variables given and nothing else.\n" +
			"Without --client: " + strings.Join(noproxy.DefaultClientNames, ", ") + ".\n" +
			"--client takes a row (" + strings.Join(noproxy.ClientNames(), ", ") + "),\n" +
			"a family name (its newest release), FAMILY@VERSION (the row whose range holds that release,\n" +
			"e.g. axios@1.13 or undici@8.10.0), or all. `egret noproxy clients` lists the rows and their ranges.",
		Example: "  egret noproxy explain http://10.96.0.1/ --env HTTP_PROXY=http://proxy:3128 --env NO_PROXY=10.96.0.0/12\n" +
			"  egret noproxy explain https://kubernetes.default.svc/ --client go --client python-urllib -o json\n" +
			"  egret noproxy explain https://corp.test.:443/ --env HTTPS_PROXY=http://proxy:3128 --env NO_PROXY=CORP.TEST --client undici@8.10.0,undici@8.13",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := envFromFlags(envs)
			if err != nil {
				return usageErr("%v", err)
			}
			cs, err := noproxy.SelectClients(clients)
			if err != nil {
				return usageErr("%v", err)
			}
			rs, err := noproxy.Explain(args[0], env, cs)
			if err != nil {
				return usageErr("%v", err)
			}
			switch output {
			case "json":
				return writeJSON(cmd.OutOrStdout(), rs)
			case "table", "":
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CLIENT\tDECISION\tPROXY\tREASON")
				for _, r := range rs {
					p := r.Proxy
					if p == "" {
						p = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Client, r.Decision, p, r.Reason)
				}
				return tw.Flush()
			default:
				return usageErr("unknown output %q (table, json)", output)
			}
		},
	}
	cmd.Flags().StringArrayVar(&envs, "env", nil, "NAME=VALUE: use exactly these variables instead of egret's environment (repeatable)")
	cmd.Flags().StringArrayVar(&clients, "client", nil, "limit to this client: a row, a family (its newest release), FAMILY@VERSION or all (repeatable; comma-separated lists work too)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func newNoproxyClientsCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "clients",
		Short: "List the client models: family, release range, and how each was verified",
		Long: "clients lists every model row: its name, its family (--client FAMILY@VERSION picks the row whose\n" +
			"range holds VERSION), the releases it stands for, and how it was verified: live (the real client,\n" +
			"run by the differential test in CI, at the releases listed) or source (modelled from the source).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			type row struct {
				Name     string   `json:"name"`
				Family   string   `json:"family"`
				Versions string   `json:"versions"`
				Verified string   `json:"verified"`
				Checked  []string `json:"checked,omitempty"`
				Source   string   `json:"source,omitempty"`
				Runtime  string   `json:"runtime"`
			}
			var rows []row
			for _, c := range noproxy.Clients() {
				rows = append(rows, row{c.Name, c.Family, c.Versions(), c.Verified.String(), c.Checked, c.Source, c.Runtime})
			}
			switch output {
			case "json":
				return writeJSON(cmd.OutOrStdout(), rows)
			case "table", "":
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CLIENT\tFAMILY\tVERSIONS\tVERIFIED\tCHECKED")
				for _, r := range rows {
					checked := strings.Join(r.Checked, " ")
					if checked == "" {
						checked = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Family, r.Versions, r.Verified, checked)
				}
				return tw.Flush()
			default:
				return usageErr("unknown output %q (table, json)", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// envFromFlags returns egret's own environment when no --env was given.
func envFromFlags(envs []string) (noproxy.Env, error) {
	if len(envs) == 0 {
		return noproxy.EnvFromList(os.Environ())
	}
	return noproxy.EnvFromList(envs)
}

func newNoproxyLintCmd() *cobra.Command {
	var (
		clients, cidrs, apiIPs, externals, envs []string
		domain, output                          string
		skipEssentials                          bool
	)
	cmd := &cobra.Command{
		Use:   "lint [VALUE]",
		Short: "Check a NO_PROXY value against every client runtime and the cluster's essentials",
		Long: "lint reports entries some client ignores or misreads (who, and the fix), cluster destinations\n" +
			"that would go to the proxy (.svc, ." + "cluster.local, the API server names and IPs, the Service/Pod CIDRs,\n" +
			"169.254.169.254, loopback), entries that are too broad, and - with --env - both-case mismatches.\n" +
			"VALUE defaults to NO_PROXY (else no_proxy) from --env.\n\n" +
			"Exit codes: 0 no error finding; 1 at least one error finding; 2 bad arguments.",
		Example: "  egret noproxy lint '.svc,.cluster.local,10.96.0.0/12' --cluster-cidrs 10.96.0.0/12,10.244.0.0/16\n" +
			"  egret noproxy lint --env NO_PROXY=.svc --env no_proxy=.svc,.cluster.local -o json",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := noproxy.LintOptions{Clients: clients, ClusterDomain: domain, External: externals, SkipEssentials: skipEssentials}
			for _, c := range splitList(cidrs) {
				p, err := netip.ParsePrefix(c)
				if err != nil {
					return usageErr("--cluster-cidrs: %v", err)
				}
				opts.ClusterCIDRs = append(opts.ClusterCIDRs, p)
			}
			for _, s := range splitList(apiIPs) {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return usageErr("--api-server-ip: %v", err)
				}
				opts.APIServerIPs = append(opts.APIServerIPs, a)
			}
			opts.External = splitList(externals)
			opts.Clients = splitList(clients)
			if _, err := noproxy.SelectClients(opts.Clients); err != nil {
				return usageErr("%v", err)
			}
			var value string
			if len(envs) > 0 {
				env, err := noproxy.EnvFromList(envs)
				if err != nil {
					return usageErr("%v", err)
				}
				opts.Env = env
				if v, ok := env["NO_PROXY"]; ok {
					value = v
				} else {
					value = env["no_proxy"]
				}
			}
			if len(args) == 1 {
				value = args[0]
			} else if len(envs) == 0 {
				return usageErr("give a NO_PROXY value or --env NO_PROXY=...")
			}
			fs := noproxy.Lint(value, opts)
			switch output {
			case "json":
				if fs == nil {
					fs = []noproxy.Finding{}
				}
				if err := writeJSON(cmd.OutOrStdout(), fs); err != nil {
					return err
				}
			case "text", "":
				writeFindings(cmd.OutOrStdout(), fs)
			default:
				return usageErr("unknown output %q (text, json)", output)
			}
			if noproxy.HasErrors(fs) {
				return &ExitError{Code: noproxyExitFindings}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&clients, "clients", nil, "client runtimes that matter (default: all)")
	f.StringSliceVar(&cidrs, "cluster-cidrs", nil, "Service and Pod CIDRs that must go direct")
	f.StringVar(&domain, "cluster-domain", "cluster.local", "the cluster DNS domain")
	f.StringSliceVar(&apiIPs, "api-server-ip", nil, "API server addresses (kubernetes Service IP, endpoints)")
	f.StringArrayVar(&externals, "external", nil, "a name that must use the fixed egress (proxy) (repeatable)")
	f.StringArrayVar(&envs, "env", nil, "NAME=VALUE of the environment the value comes from (enables both-case checks)")
	f.BoolVar(&skipEssentials, "no-essentials", false, "do not check cluster essentials")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func writeFindings(w io.Writer, fs []noproxy.Finding) {
	if len(fs) == 0 {
		fmt.Fprintln(w, "no findings")
		return
	}
	for _, f := range fs {
		fmt.Fprintf(w, "%-7s %s  %s\n", f.Severity, f.Rule, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(w, "                fix: %s\n", f.Fix)
		}
	}
	counts := map[noproxy.Severity]int{}
	for _, f := range fs {
		counts[f.Severity]++
	}
	fmt.Fprintf(w, "%d error(s), %d warning(s), %d info\n", counts[noproxy.SeverityError], counts[noproxy.SeverityWarning], counts[noproxy.SeverityInfo])
}

func newNoproxyRenderCmd() *cobra.Command {
	var target, proxy, namespace string
	var registries []string
	cmd := &cobra.Command{
		Use:   "render VALUE --for env|configmap|java|containerd|crio|docker|kubelet",
		Short: "Write a NO_PROXY value for a consumer: both-case env, ConfigMap, JAVA_TOOL_OPTIONS, systemd drop-ins",
		Example: "  egret noproxy render '.svc,.cluster.local,10.96.0.0/12' --for java --proxy http://proxy:3128\n" +
			"  egret noproxy render '.svc,10.0.0.0/8' --for containerd --proxy http://proxy:3128 --registry registry.internal:5000",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			value := args[0]
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			// Refuse what a consumer would misread before writing anything.
			if err := noproxy.CheckValue(value); err != nil {
				return usageErr("%v (egret noproxy lint explains each entry)", strings.ReplaceAll(err.Error(), "\n", "; "))
			}
			if proxy != "" {
				p := proxy
				if !strings.Contains(p, "://") {
					p = "http://" + p
				}
				if _, err := noproxy.CheckProxyURL(p); err != nil {
					return usageErr("--proxy: %v", err)
				}
			}
			for _, r := range registries {
				if _, err := noproxy.RegistryHost(r); err != nil {
					return usageErr("--registry: %v", err)
				}
			}
			switch target {
			case "env":
				fmt.Fprint(out, noproxy.RenderEnv(noproxy.WithEntries(value, registries...), proxy))
			case "configmap":
				y, err := noproxy.RenderConfigMap(noproxy.WithEntries(value, registries...), namespace)
				if err != nil {
					return err
				}
				fmt.Fprint(out, y)
			case "java":
				opts, warnings, err := noproxy.JavaToolOptions(proxy, noproxy.WithEntries(value, registries...))
				if err != nil {
					return usageErr("%v", err)
				}
				for _, w := range warnings {
					fmt.Fprintln(errw, "warning:", w)
				}
				fmt.Fprintf(out, "JAVA_TOOL_OPTIONS=%s\n", opts)
			case "containerd", "crio", "docker", "kubelet":
				d, err := noproxy.RenderDropIn(noproxy.Runtime(target), noproxy.DropInOptions{Proxy: proxy, NoProxy: value, Registries: registries})
				if err != nil {
					return usageErr("%v", err)
				}
				fmt.Fprintf(out, "# %s\n%s", d.Path, d.Content)
			case "":
				return usageErr("--for is required (env, configmap, java, containerd, crio, docker, kubelet)")
			default:
				return usageErr("unknown --for %q (env, configmap, java, containerd, crio, docker, kubelet)", target)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&target, "for", "", "env, configmap, java, containerd, crio, docker or kubelet")
	cmd.Flags().StringVar(&proxy, "proxy", "", "proxy URL for HTTP(S)_PROXY / -Dhttp(s).proxyHost (credentials are not written for java)")
	cmd.Flags().StringArrayVar(&registries, "registry", nil, "internal registry host[:port] to add to NO_PROXY (repeatable)")
	cmd.Flags().StringVar(&namespace, "namespace", "", "namespace of the ConfigMap")
	return cmd
}

func splitList(in []string) []string {
	var out []string
	for _, s := range in {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

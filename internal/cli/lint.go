package cli

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/lint"
	"egret.io/egret/internal/noproxy"
	"egret.io/egret/internal/version"
)

// Exit codes of `egret lint`.
const (
	lintExitFindings = 1 // at least one error-level finding
	lintExitInput    = 2 // bad flags, unreadable or unparsable input
)

func newLintCmd() *cobra.Command {
	var (
		output       string
		cidrs        []string
		domain       string
		apiIPs       []string
		expectProxy  string
		intercepting []string
		metadata     []string
		docsBase     string
	)
	cmd := &cobra.Command{
		Use:   "lint [flags] PATH|- ...",
		Short: "Check Kubernetes manifests for egress proxy mistakes",
		Long: `lint reads Kubernetes manifests (multi-document YAML, JSON, List kinds,
directories searched recursively for *.yaml, *.yml and *.json, "-" for stdin)
and reports the classic egress mistakes: proxy variables without a complete
NO_PROXY, credentials in plain values, one-case or disagreeing variables, JVM
and Node.js containers that ignore the variables, proxy sidecars that are not
native sidecars, and egress gateways without replicas, anti-affinity, a
PodDisruptionBudget or a NetworkPolicy. ConfigMaps and Secrets in the input
are resolved for envFrom and valueFrom.

Exit status: 0 no error-level finding, 1 at least one error-level finding,
2 bad usage or input that cannot be read or parsed (findings for the readable
objects are still printed).`,
		Example: `  egret lint deploy/
  kustomize build overlays/prod | egret lint -o sarif - > egret.sarif
  egret lint --cluster-cidrs 10.96.0.0/12,10.244.0.0/16 --api-server-ip 10.96.0.1 -o json app.yaml`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &ExitError{Code: lintExitInput, Err: errors.New("lint: give at least one file, directory or - for stdin")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			usage := func(err error) error { return &ExitError{Code: lintExitInput, Err: err} }
			switch output {
			case "text", "json", "sarif":
			default:
				return usage(fmt.Errorf("unknown output format %q (want text, json or sarif)", output))
			}
			cl := lint.Cluster{Domain: strings.TrimSuffix(strings.TrimPrefix(domain, "."), "."), Proxy: expectProxy, InterceptingProxies: intercepting}
			for _, list := range cidrs {
				for _, s := range strings.Split(list, ",") {
					if s = strings.TrimSpace(s); s == "" {
						continue
					}
					p, err := netip.ParsePrefix(s)
					if err != nil {
						return usage(fmt.Errorf("--cluster-cidrs: %w", err))
					}
					cl.CIDRs = append(cl.CIDRs, p.Masked())
				}
			}
			for _, list := range apiIPs {
				for _, s := range strings.Split(list, ",") {
					if s = strings.TrimSpace(s); s == "" {
						continue
					}
					a, err := netip.ParseAddr(s)
					if err != nil {
						return usage(fmt.Errorf("--api-server-ip: %w", err))
					}
					cl.APIServerIPs = append(cl.APIServerIPs, a)
				}
			}
			if cmd.Flags().Changed("metadata-address") {
				cl.MetadataAddrs = []netip.Addr{} // given: exactly these, none when empty
				for _, list := range metadata {
					for _, s := range strings.Split(list, ",") {
						if s = strings.TrimSpace(s); s == "" {
							continue
						}
						a, err := netip.ParseAddr(s)
						if err != nil {
							return usage(fmt.Errorf("--metadata-address: %w", err))
						}
						cl.MetadataAddrs = append(cl.MetadataAddrs, a)
					}
				}
			}
			objs, readErr := lint.ReadPaths(args, cmd.InOrStdin())
			findings, checkErr := lint.Check(objs, lint.Options{Cluster: cl})
			out := cmd.OutOrStdout()
			var err error
			switch output {
			case "json":
				err = lint.WriteJSON(out, findings, docsBase)
			case "sarif":
				err = lint.WriteSARIF(out, findings, version.Get().Version, docsBase)
			default:
				err = lint.WriteText(out, findings, len(objs), docsBase)
			}
			if err != nil {
				return fmt.Errorf("write report: %w", err)
			}
			if len(objs) == 0 && readErr == nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "egret: warning: no Kubernetes objects in the input")
			}
			if inErr := errors.Join(readErr, checkErr); inErr != nil {
				return &ExitError{Code: lintExitInput, Err: inErr}
			}
			if lint.MaxSeverity(findings) >= lint.Error {
				return &ExitError{Code: lintExitFindings}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "text", "output format: text, json or sarif")
	f.StringSliceVar(&cidrs, "cluster-cidrs", nil, "Service and Pod CIDRs that NO_PROXY must cover (comma-separated, repeatable)")
	f.StringVar(&domain, "cluster-domain", "cluster.local", "cluster DNS domain")
	f.StringSliceVar(&apiIPs, "api-server-ip", nil, "API server / kubernetes Service addresses that NO_PROXY must cover (repeatable)")
	f.StringVar(&expectProxy, "expect-proxy", "", "proxy URL pods must use (report variables naming another proxy)")
	f.StringSliceVar(&intercepting, "intercepting-proxy", nil, "proxy (host[:port], repeatable) that intercepts TLS: pods using it need a CA for every runtime (rule tls-ca-missing)")
	f.StringVar(&docsBase, "docs-base", lint.DefaultDocsBase, "where the rule links point: docs/lint.md or its published URL (SARIF helpUri needs an absolute URL)")
	f.StringSliceVar(&metadata, "metadata-address", []string{noproxy.DefaultMetadataAddr}, "cloud metadata addresses that NO_PROXY must cover (repeatable; \"\" checks none)")
	return cmd
}

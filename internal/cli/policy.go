package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"egret.io/egret/internal/logging"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/route"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Per-workload egress policies at the gateway (EgressPolicy)",
	}
	cmd.AddCommand(newPolicyExplainCmd())
	return cmd
}

func newPolicyExplainCmd() *cobra.Command {
	var kf kubeFlags
	var from, to, output, method, path string
	cmd := &cobra.Command{
		Use:   "explain --from NAMESPACE/POD --to HOST:PORT [--method METHOD] [--path PATH]",
		Short: "Say what the gateway's EgressPolicies do with a pod's connection to HOST:PORT, and why",
		Long: "explain reads the pod, the EgressPolicies of its namespace and the ClusterEgressPolicy default from\n" +
			"the API server and decides as an egret gateway with EGRET_POLICY would for that pod: the verdict,\n" +
			"the policy and the rule that decided, and the pool the traffic would use. Names are resolved\n" +
			"here for CIDR rules; the gateway resolves them itself. For a destination the policies intercept,\n" +
			"it names the site and its credentials (never a value), and --method and --path are judged by its\n" +
			"method and path rules.",
		Example: "  egret policy explain --from shop/web-7d9f --to api.stripe.com:443\n" +
			"  egret policy explain --from shop/agent-1 --to api.openai.example:443 --method DELETE --path /v1/files/f-1\n" +
			"  egret policy explain --kubeconfig ~/.kube/prod --from batch/report-1 --to 10.0.0.5:5432 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns, pod, ok := strings.Cut(from, "/")
			if !ok || ns == "" || pod == "" || strings.Contains(pod, "/") {
				return usageError(fmt.Errorf("--from %q: want NAMESPACE/POD", from))
			}
			dest, err := route.ParseDest(to, 0)
			if err != nil {
				return usageError(fmt.Errorf("--to: %w", err))
			}
			if path != "" && !strings.HasPrefix(path, "/") {
				return usageError(fmt.Errorf("--path %q: want a path starting with /", path))
			}
			if method != "" && strings.ContainsAny(method, " \t/:") {
				return usageError(fmt.Errorf("--method %q: want an HTTP method such as GET", method))
			}
			if output != "text" && output != "json" {
				return usageError(fmt.Errorf("unknown output %q (text, json)", output))
			}
			if _, err := kf.logger(cmd); err != nil {
				return err
			}
			rc, err := kf.restConfig()
			if err != nil {
				return err
			}
			kube, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(rc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			ex, err := policy.Explain(ctx, policy.ExplainInput{Kube: kube, Dynamic: dyn, Namespace: ns, Pod: pod,
				Dest: dest, Resolver: net.DefaultResolver, Method: method, Path: path})
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), ex)
			}
			printExplanation(cmd.OutOrStdout(), ex)
			return nil
		},
	}
	kf.add(cmd, logging.Text, "warn")
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the client pod, NAMESPACE/POD (required)")
	f.StringVar(&to, "to", "", "the destination, HOST:PORT (required)")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	f.StringVar(&method, "method", "", "judge this HTTP `METHOD` by the intercepted site's rules (default GET when --path is given)")
	f.StringVar(&path, "path", "", "judge this request `PATH` by the intercepted site's rules (the query is never matched)")
	cmd.MarkFlagRequired("from")
	cmd.MarkFlagRequired("to")
	return cmd
}

func printExplanation(w io.Writer, ex *policy.Explanation) {
	or := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	fmt.Fprintf(w, "pod:       %s (service account %s)\n", ex.Pod, or(ex.ServiceAccount, "default"))
	fmt.Fprintf(w, "to:        %s\n", ex.Dest)
	fmt.Fprintf(w, "verdict:   %s\n", ex.Verdict)
	fmt.Fprintf(w, "policy:    %s\n", or(ex.Policy, "none"))
	if len(ex.Policies) > 1 {
		fmt.Fprintf(w, "applies:   %s\n", strings.Join(ex.Policies, ", "))
	}
	fmt.Fprintf(w, "rule:      %s\n", ex.Rule)
	if ex.WouldDeny != "" {
		fmt.Fprintf(w, "would deny: %s (report-only)\n", ex.WouldDeny)
	}
	pool := ex.Pool
	switch {
	case ex.Verdict == policy.VerdictDeny:
		pool = "none (refused)"
	case pool == "":
		pool = "the gateway's routes decide"
	}
	fmt.Fprintf(w, "pool:      %s\n", pool)
	ie := ex.Intercept
	if ie == nil {
		return
	}
	if !ie.Intercepted {
		fmt.Fprintf(w, "intercept: no (an opaque tunnel: egret sees no method or path; the gateway's own sites are not known here)\n")
		return
	}
	fmt.Fprintf(w, "intercept: site %s, mode %s\n", ie.Site, ie.Mode)
	for _, c := range ie.Credentials {
		fmt.Fprintf(w, "credential: %s\n", c)
	}
	if len(ie.Exempt) > 0 {
		fmt.Fprintf(w, "exempt:    %s (stay tunnels)\n", strings.Join(ie.Exempt, ", "))
	}
	if ie.Method != "" {
		fmt.Fprintf(w, "request:   %s %s\n", ie.Method, ie.Path)
		fmt.Fprintf(w, "http:      %s (%s", ie.Verdict, ie.Rule)
		if ie.ReadAs != ie.Path {
			fmt.Fprintf(w, ", the path read as %s", ie.ReadAs)
		}
		if ie.AnyCase {
			fmt.Fprintf(w, ", in any letter case")
		}
		fmt.Fprintf(w, ")\n")
	}
}

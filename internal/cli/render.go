package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/logging"
	"egret.io/egret/internal/netpol"
)

func newRenderCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Render the objects egret's controllers write, for GitOps",
	}
	cmd.AddCommand(newRenderNetworkPolicyCmd())
	return cmd
}

func newRenderNetworkPolicyCmd() *cobra.Command {
	var (
		kf      kubeFlags
		df      discoveryFlags
		po      netpol.Options
		egretNS string
		timeout time.Duration
	)
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "egret-system"
	}
	cmd := &cobra.Command{
		Use:   "networkpolicy NAMESPACE",
		Short: "Print the egress NetworkPolicy egret writes into a namespace labelled " + netpol.Label + "=" + netpol.Enabled,
		Long: `Reads the cluster as egret webhook does (NO_PROXY discovery's ranges, the DNS
and gateway Services) and prints, as YAML, the NetworkPolicy the webhook's
leader writes into a namespace labelled ` + netpol.Label + `=` + netpol.Enabled + `:
egress to the cluster DNS pods (and NodeLocal DNSCache's link-local address when
the DaemonSet kube-system/node-local-dns runs, or --node-local-dns names it),
the gateway's pods on its proxy port, and the
cluster's own ranges and pods — nothing else. Commit it when no controller may
write policies; render it again when egret noproxy discover changes.

Warnings (a Service not found, no pod range) go to stderr.
Exit codes: 0 printed, 1 error (no cluster), 2 bad flags.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := df.options()
			if err != nil {
				return usageError(err)
			}
			if err := po.Validate(); err != nil {
				return usageError(err)
			}
			if _, err := kf.logger(cmd); err != nil {
				return err
			}
			cfg, err := kf.restConfig()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{})
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			r, err := discovery.Discover(ctx, c, discovery.KubeletConfigzFrom(cs), opts)
			if err != nil {
				return err
			}
			dns, gw, warns, err := netpol.ReadPeers(ctx, c, egretNS, po)
			if err != nil {
				return err
			}
			for _, w := range append(r.Warnings, warns...) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			np := netpol.Render(args[0], netpol.Inputs{DNS: dns, Gateway: gw, Ranges: netpol.Ranges(r)})
			b, err := yaml.Marshal(np)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	kf.add(cmd, logging.Text, "warn")
	df.add(cmd)
	f := cmd.Flags()
	f.StringVar(&egretNS, "namespace", ns, "egret's own namespace (the gateway Service's default namespace)")
	f.StringVar(&po.DNSService, "dns-service", "kube-system/kube-dns", "the cluster DNS Service (NAMESPACE/NAME)")
	f.StringVar(&po.GatewayService, "gateway-service", "egret-gateway", "the egress gateway's Service ([NAMESPACE/]NAME); its port named proxy is allowed")
	f.StringVar(&po.NodeLocalDNS, "node-local-dns", "auto", "NodeLocal DNSCache's addresses, allowed on UDP/TCP 53: auto (from DaemonSet kube-system/node-local-dns, its -localip), off, or IP[,IP]")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "time allowed for reading the cluster")
	return cmd
}

package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/ipaddr"
	"egret.io/egret/internal/logging"

	"github.com/spf13/cobra"
)

// kubeFlags are the client flags shared by the Kubernetes commands, with
// their log's (--log-format, --log-level), which client-go logs into.
type kubeFlags struct {
	kubeconfig string
	context    string
	logs       logging.Flags
}

// add registers the flags; format and level are the log's defaults.
func (k *kubeFlags) add(cmd *cobra.Command, format logging.Format, level string) {
	cmd.Flags().StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig `file` (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	cmd.Flags().StringVar(&k.context, "context", "", "kubeconfig `context` (default: the current one)")
	k.logs.Add(cmd.Flags(), format, level)
}

// logger returns the command's log on its stderr, with client-go and
// controller-runtime routed into it; call it before making a client.
func (k *kubeFlags) logger(cmd *cobra.Command) (*slog.Logger, error) {
	log, err := k.logs.Logger(cmd.ErrOrStderr())
	if err != nil {
		return nil, usageError(err)
	}
	return log, nil
}

func (k *kubeFlags) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k.kubeconfig != "" {
		rules.ExplicitPath = k.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: k.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "egret"
	return cfg, nil
}

// discoveryFlags are the flags of the NO_PROXY computation, shared by
// `egret noproxy discover` and `egret webhook`.
type discoveryFlags struct {
	clusterDomain string
	serviceCIDRs  []string
	podCIDRs      []string
	nodeCIDRs     []string
	metadata      []string
	additions     string
}

func (d *discoveryFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&d.clusterDomain, "cluster-domain", "", "cluster DNS domain (default: read from the cluster — the kubelet's configz, then CoreDNS's Corefile — else "+discovery.DefaultClusterDomain+")")
	f.StringSliceVar(&d.serviceCIDRs, "service-cidr", nil, "Service ranges, used when the cluster has no ServiceCIDR objects (before 1.33)")
	f.StringSliceVar(&d.podCIDRs, "pod-cidr", nil, "Pod ranges always added (when the CNI leaves Node spec.podCIDRs empty)")
	f.StringSliceVar(&d.nodeCIDRs, "node-cidr", nil, "the nodes' subnets, always added (node InternalIPs inside them are not listed one by one)")
	f.StringSliceVar(&d.metadata, "metadata-address", discovery.DefaultMetadataAddresses, "cloud metadata addresses (empty to leave them out)")
	f.StringVar(&d.additions, "additions", "", "cluster-wide additions ConfigMap NAMESPACE/NAME (key NO_PROXY; label app.kubernetes.io/part-of=egret)")
}

func (d *discoveryFlags) options() (discovery.Options, error) {
	o := discovery.Options{ClusterDomain: d.clusterDomain, Additions: d.additions, MetadataAddresses: d.metadata}
	if o.MetadataAddresses == nil {
		o.MetadataAddresses = []string{}
	}
	for _, s := range d.serviceCIDRs {
		p, err := ipaddr.ParsePrefix(s)
		if err != nil {
			return o, fmt.Errorf("--service-cidr: %w", err)
		}
		o.ServiceCIDRs = append(o.ServiceCIDRs, p)
	}
	for _, s := range d.podCIDRs {
		p, err := ipaddr.ParsePrefix(s)
		if err != nil {
			return o, fmt.Errorf("--pod-cidr: %w", err)
		}
		o.PodCIDRs = append(o.PodCIDRs, p)
	}
	for _, s := range d.nodeCIDRs {
		p, err := ipaddr.ParsePrefix(s)
		if err != nil {
			return o, fmt.Errorf("--node-cidr: %w", err)
		}
		o.NodeCIDRs = append(o.NodeCIDRs, p)
	}
	return o, o.Validate()
}

func newNoproxyDiscoverCmd() *cobra.Command {
	var (
		kf        kubeFlags
		df        discoveryFlags
		namespace string
		output    string
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "discover",
		Short: "Compute the cluster's NO_PROXY from the live cluster and print it once",
		Long: `Reads the cluster (ServiceCIDR objects, Node podCIDRs and InternalIPs, the
kubernetes Service and its EndpointSlices, the cluster domain, the additions
ConfigMap) and prints the NO_PROXY value that egret webhook injects and writes
into ConfigMap egress-proxy-common.

The cluster domain is --cluster-domain when given; else the kubelet's
clusterDomain (a node's /configz through the API server: RBAC nodes/proxy),
else the first zone of CoreDNS's kubernetes plugin (ConfigMap
kube-system/coredns), else cluster.local with a warning.

-o json prints every entry with its kind and the sources it came from.
Warnings (no Service range, no Pod range found) go to stderr.
Exit codes: 0 printed, 1 error (no cluster), 2 bad flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageError(fmt.Errorf("-o %q: want text or json", output))
			}
			opts, err := df.options()
			if err != nil {
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
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			r, err := discovery.Discover(ctx, c, discovery.KubeletConfigzFrom(cs), opts)
			if err != nil {
				return err
			}
			if namespace != "" {
				var ns corev1.Namespace
				if err := c.Get(ctx, types.NamespacedName{Name: namespace}, &ns); err != nil {
					return fmt.Errorf("get namespace %s: %w", namespace, err)
				}
				adds, err := discovery.NamespaceAdditions(&ns)
				if err != nil {
					return err
				}
				r = r.With(adds)
			}
			for _, w := range r.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			if output == "json" {
				_, err = cmd.OutOrStdout().Write(r.Explain())
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), r.Value())
			return err
		},
	}
	kf.add(cmd, logging.Text, "warn")
	df.add(cmd)
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "also add this namespace's "+discovery.NoProxyAnnotation+" annotation entries")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output: text (the value) or json (entries and sources)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "time allowed for reading the cluster")
	return cmd
}

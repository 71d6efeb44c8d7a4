package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/drift"
	"egret.io/egret/internal/logging"
	"egret.io/egret/internal/webhook"
)

// egretNamespace is the default of --egret-namespace: $POD_NAMESPACE, else
// egret-system (as `egret webhook --namespace`).
func egretNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "egret-system"
}

func newPodsCmd() *cobra.Command {
	var (
		kf      kubeFlags
		o       drift.ListOptions
		all     bool
		output  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "pods",
		Short: "List the pods egret injected, and which are stale (injected with values that changed since)",
		Long: `Lists the pods egret's webhook injected (label egret.io/injected) with their mode and, from the
drift report the webhook's elected leader publishes (ConfigMap egret-drift in egret's namespace),
the parts of what was injected that changed since:

  noproxy          the cluster's NO_PROXY (or the namespace's egret.io/no-proxy)
  proxy            the proxy URL (--gateway-url)
  image            the sidecar's or the iptables init container's image
  uid              the sidecar's UID
  upstream_secret  the Secret the sidecar reads its upstream from (read once at start)
  trust            the CA bundle (egret-trust-bundle)

A stale pod keeps the old values until it is recreated. --stale lists only those; a workload or
namespace annotated egret.io/restart-stale=true is restarted by egret (egret status shows how).
Exit codes: 0 listed, 1 error (no cluster, --stale without a report), 2 bad flags.`,
		Example: `  egret pods --stale -A
  egret pods -n shop -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageError(fmt.Errorf("-o %q: want text or json", output))
			}
			if all && o.Namespace != "" {
				return usageError(fmt.Errorf("-A and -n %s: give one", o.Namespace))
			}
			if _, err := kf.logger(cmd); err != nil {
				return err
			}
			cl, err := kf.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			l, err := drift.ListPods(ctx, cl, o)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), l)
			}
			return drift.WritePods(cmd.OutOrStdout(), l, time.Now())
		},
	}
	kf.add(cmd, logging.Text, "warn")
	f := cmd.Flags()
	f.StringVarP(&o.Namespace, "namespace", "n", "", "only this namespace's pods (default: all)")
	f.BoolVarP(&all, "all-namespaces", "A", false, "every namespace's pods (the default)")
	f.BoolVar(&o.Stale, "stale", false, "only the stale pods")
	f.StringVar(&o.EgretNamespace, "egret-namespace", egretNamespace(), "egret's namespace (the drift report's ConfigMap)")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "time allowed for reading the cluster")
	return cmd
}

func newStatusCmd() *cobra.Command {
	var (
		kf      kubeFlags
		ns      string
		output  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show egret's webhook leader, the drift report (stale pods by part and workload) and the restarts",
		Long: `Reads the webhook's Lease and the drift report its elected leader publishes (ConfigMap egret-drift in
egret's namespace): injected and stale pods by part, the stale workloads with their restart opt-in
and state (restarting, queued, would restart (dry run), blocked by a PodDisruptionBudget, waiting),
and the recent restarts. -o json prints the report as published.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageError(fmt.Errorf("-o %q: want text or json", output))
			}
			if _, err := kf.logger(cmd); err != nil {
				return err
			}
			cl, err := kf.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st, err := drift.ReadStatus(ctx, cl, ns, webhook.LeaseName)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			drift.WriteStatus(cmd.OutOrStdout(), st, ns, time.Now())
			return nil
		},
	}
	kf.add(cmd, logging.Text, "warn")
	f := cmd.Flags()
	f.StringVar(&ns, "egret-namespace", egretNamespace(), "egret's namespace (the Lease and the drift report)")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "time allowed for reading the cluster")
	return cmd
}

// client is a controller-runtime client for the flags' cluster.
func (k *kubeFlags) client() (client.Client, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

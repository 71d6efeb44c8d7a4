package cli

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/logging"
	"egret.io/egret/internal/netpol"
	"egret.io/egret/internal/webhook"
)

func newWebhookCmd() *cobra.Command {
	var (
		kf      kubeFlags
		df      discoveryFlags
		o       webhook.Options
		pc      webhook.Config
		service string
		hosts   []string
		leader  bool
	)
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Run the admission webhook (inject and validate proxy settings) and NO_PROXY discovery",
		Long: `Serves /mutate, /validate, /healthz and /readyz over TLS and keeps ConfigMap
egress-proxy-common current in every namespace labelled egret.io/inject=enabled.

TLS: by default egret keeps its own CA and serving certificate in the Secret
--secret (created and renewed by every replica) and writes the CA into the
caBundle of --mutating-config and --validating-config. With --cert-dir it
serves tls.crt/tls.key from that directory instead (cert-manager).

Modes (--mode, or per pod/namespace annotation egret.io/mode):
  gateway      variables point at --gateway-url
  sidecar      a native egret sidecar (initContainers, restartPolicy: Always)
  transparent  sidecar + the egret iptables init container
Validation (--validation): off, warn (admission warnings), enforce (deny errors).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// controller-runtime and client-go log into the same stream.
			log, err := kf.logger(cmd)
			if err != nil {
				return err
			}
			cfg, err := kf.restConfig()
			if err != nil {
				return logExit(log, "egret webhook", err)
			}
			if o.Discovery, err = df.options(); err != nil {
				return usageError(err)
			}
			o.Config = cfg
			o.Policy = pc
			o.LeaderElection = leader
			domain := df.clusterDomain
			if domain == "" {
				domain = discovery.DefaultClusterDomain
			}
			o.Hosts = append([]string{service + "." + o.Namespace + ".svc", service + "." + o.Namespace + ".svc." + domain}, hosts...)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return logExit(log, "egret webhook", webhook.Run(ctx, o))
		},
	}
	kf.add(cmd, logging.JSON, "info")
	df.add(cmd)
	f := cmd.Flags()
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "egret-system"
	}
	f.StringVar(&o.Namespace, "namespace", ns, "egret's own namespace (default $POD_NAMESPACE): never injected, holds the Secret and the Lease")
	f.StringVar(&o.Listen, "listen", ":9443", "TLS address for /mutate, /validate, /healthz, /readyz")
	f.StringVar(&o.MetricsListen, "metrics-listen", "0", `controller metrics address ("0": off)`)
	f.StringVar(&o.CertDir, "cert-dir", "", "serve tls.crt/tls.key from this directory (cert-manager) instead of the self-managed CA")
	f.StringVar(&o.SecretName, "secret", "egret-webhook-tls", "Secret holding the self-managed CA and serving certificate")
	f.StringVar(&service, "service", "egret-webhook", "the webhook's Service name (the serving certificate's DNS names)")
	f.StringSliceVar(&hosts, "host", nil, "extra names or addresses for the serving certificate")
	f.StringSliceVar(&o.MutatingWebhooks, "mutating-config", []string{"egret"}, "MutatingWebhookConfigurations whose caBundle egret maintains")
	f.StringSliceVar(&o.ValidatingWebhooks, "validating-config", []string{"egret"}, "ValidatingWebhookConfigurations whose caBundle egret maintains")
	f.BoolVar(&leader, "leader-elect", true, "elect one replica to write the NO_PROXY ConfigMaps")
	f.StringVar(&pc.Mode, "mode", "gateway", "default mode: gateway, sidecar or transparent")
	f.StringVar(&pc.GatewayURL, "gateway-url", "", "egress gateway URL, e.g. http://egret-gateway.egret-system.svc:3128")
	f.BoolVar(&pc.GatewayToken, "gateway-token", false, "give sidecars that chain to the gateway the pod's projected service-account token (audience egret), for a gateway with EGRET_POLICY")
	f.StringVar(&pc.Image, "image", "", "egret image for the injected sidecar")
	f.StringVar(&pc.IptablesImage, "iptables-image", "", "image for the egret iptables init container (default: --image with -iptables appended to its tag)")
	f.StringVar(&pc.SidecarResources.CPURequest, "sidecar-cpu-request", "", "the injected sidecar's CPU request (default 20m); a pod's annotation egret.io/proxy-cpu-request overrides it")
	f.StringVar(&pc.SidecarResources.MemoryRequest, "sidecar-memory-request", "", "the injected sidecar's memory request (default 32Mi); annotation egret.io/proxy-memory-request")
	f.StringVar(&pc.SidecarResources.CPULimit, "sidecar-cpu-limit", "", "the injected sidecar's CPU limit (default none); annotation egret.io/proxy-cpu-limit")
	f.StringVar(&pc.SidecarResources.MemoryLimit, "sidecar-memory-limit", "", "the injected sidecar's memory limit (default 128Mi); annotation egret.io/proxy-memory-limit")
	f.StringSliceVar(&pc.ImagePullSecrets, "image-pull-secret", nil, "image pull Secret (in the pod's namespace) added to the pods egret gives a sidecar (repeatable)")
	f.StringVar(&pc.UpstreamSecret, "upstream-secret", "", "Secret (in the pod's namespace) the sidecar reads its upstream proxy from (envFrom, optional)")
	f.StringVar(&pc.Validation, "validation", "warn", "validation: off, warn or enforce")
	f.Int64Var(&pc.SidecarUID, "sidecar-uid", webhook.DefaultSidecarUID, "UID of the injected sidecar, let through by the iptables rules (not istio-proxy's 1337); per pod: annotation "+webhook.SidecarUIDAnnotation)
	f.StringVar(&o.StaleRestart, "stale-restart", "on", "restarts of workloads whose pods are stale (annotation egret.io/restart-stale on the workload or namespace opts in): on, dry-run (report only) or off")
	f.StringVar(&o.EgressPolicy.DNSService, "dns-service", "kube-system/kube-dns", "the cluster DNS Service (NAMESPACE/NAME) the generated egress NetworkPolicies allow (namespaces labelled "+netpol.Label+"="+netpol.Enabled+")")
	f.StringVar(&o.EgressPolicy.NodeLocalDNS, "node-local-dns", "auto", "NodeLocal DNSCache's addresses the generated egress NetworkPolicies allow on UDP/TCP 53: auto (from DaemonSet kube-system/node-local-dns, its -localip), off, or IP[,IP]")
	f.StringVar(&o.EgressPolicy.GatewayService, "gateway-service", "egret-gateway", "the egress gateway's Service ([NAMESPACE/]NAME, default namespace --namespace) the generated egress NetworkPolicies allow, on its port named proxy")
	f.StringVar(&pc.Mesh, "mesh", "refuse", "transparent mode in a pod with an Istio or Linkerd proxy: refuse, or exclude (the mesh proxy's UID and ports go direct); per pod or namespace: annotation "+webhook.MeshAnnotation)
	f.StringVar(&pc.Fallback, "sidecar-fallback", "gateway", "without native sidecars: gateway (use the gateway, warn) or refuse (deny)")
	f.StringSliceVar(&pc.ExcludedNamespaces, "exclude-namespace", nil, "namespaces never injected or validated (own namespace and kube-system always are)")
	f.StringVar(&pc.Trust.ConfigMap, "ca-configmap", "", "inject the corporate CAs of this ConfigMap ([NAMESPACE/]NAME, e.g. a trust-manager Bundle target) into injected pods")
	f.StringVar(&pc.Trust.Secret, "ca-secret", "", "as --ca-configmap, from a Secret")
	f.StringVar(&pc.Trust.InterceptConfigMap, "intercept-ca-configmap", "", "add the interception CA's certificates, as the egress gateway publishes them (intercept.publish_configmap), to the injected bundle ([NAMESPACE/]NAME)")
	f.StringVar(&pc.Trust.Key, "ca-key", "", "the key holding the PEM certificates (default: every key that holds some)")
	f.StringVar(&pc.Trust.MountPath, "ca-mount-path", "", "where containers get the bundle (default /etc/egret/trust)")
	f.StringVar(&pc.Trust.SystemRoots, "ca-system-roots", "", "the system roots the corporate CAs are added to (default: the first of Go's system bundle files)")
	return cmd
}

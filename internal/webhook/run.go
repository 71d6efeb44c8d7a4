package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/drift"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/netpol"
)

// Options configure Run.
type Options struct {
	// Config reaches the API server.
	Config *rest.Config
	// Namespace is egret's own namespace (never injected; holds the Secret
	// and the leader election Lease).
	Namespace string
	// Listen is the TLS address of /mutate, /validate, /healthz, /readyz.
	Listen string
	// MetricsListen serves controller-runtime's metrics; "0" disables.
	MetricsListen string
	// CertDir, when set, holds tls.crt and tls.key (cert-manager) and
	// disables the self-managed CA.
	CertDir string
	// SecretName holds the self-managed CA and serving certificate.
	SecretName string
	// Hosts are the serving certificate's names (the Service's DNS names).
	Hosts []string
	// MutatingWebhooks and ValidatingWebhooks are the configurations whose
	// caBundle the self-managed CA keeps current.
	MutatingWebhooks, ValidatingWebhooks []string
	// Policy is the webhook policy; NativeSidecars is filled in from the API
	// server's version.
	Policy Config
	// Discovery configures the cluster NO_PROXY computation.
	Discovery discovery.Options
	// LeaderElection turns on leader election for the ConfigMap writer
	// (off only for a single replica or tests). Only the writer is elected:
	// admission, the certificate loop and the NO_PROXY tracker run in every
	// replica, and a replica that loses the lease keeps serving.
	LeaderElection bool
	// Lease timings; zero values mean 15 s, 10 s and 2 s (client-go's).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Ready, if set, is called once the server serves and discovery ran.
	Ready func()
	// StaleRestart is the drift controller's restart mode: on (the
	// default: restart the stale workloads that opted in), dry-run or off.
	StaleRestart string
	// DriftInterval is how often the leader compares the injected pods
	// (0: drift.DefaultInterval).
	DriftInterval time.Duration
	// EgressPolicy names the Services the generated egress NetworkPolicies
	// (namespaces labelled egret.io/egress-policy=enabled) allow.
	EgressPolicy netpol.Options
}

// Run serves the admission webhook and runs NO_PROXY discovery until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Config == nil || o.Namespace == "" {
		return errors.New("webhook: a cluster configuration and a namespace are needed")
	}
	cs, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("read the API server version: %w", err)
	}
	o.Policy.NativeSidecars = NativeSidecarsSupported(v)
	policy, err := o.Policy.Compile(o.Namespace)
	if err != nil {
		return fmt.Errorf("webhook policy: %w", err)
	}
	ctrl.Log.Info("webhook policy", "mode", policy.Mode.String(), "validation", policy.Validation.String(),
		"apiserver", v.GitVersion, "nativeSidecars", policy.NativeSidecars)

	host, portS, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", o.Listen, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return fmt.Errorf("--listen %q: bad port", o.Listen)
	}

	direct, err := client.New(o.Config, client.Options{})
	if err != nil {
		return err
	}
	var certs *CertManager
	wopts := crwebhook.Options{Host: host, Port: port, CertDir: o.CertDir}
	if o.CertDir == "" {
		certs = &CertManager{Client: direct, Namespace: o.Namespace, SecretName: o.SecretName, Hosts: o.Hosts,
			MutatingWebhooks: o.MutatingWebhooks, ValidatingWebhooks: o.ValidatingWebhooks}
		if err := certs.Ensure(ctx); err != nil {
			// The configurations may not exist yet; the loop retries. A
			// missing certificate is fatal.
			if !certs.Ready() {
				return fmt.Errorf("webhook certificate: %w", err)
			}
			ctrl.Log.Error(err, "webhook certificate")
		}
		wopts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = certs.GetCertificate }}
	}
	wopts.TLSOpts = append(wopts.TLSOpts, func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 })

	copts := discovery.CacheOptions()
	// No manager-wide leader election: losing the lease would stop the
	// manager, and with it admission. leaderGate elects the writer only.
	mgr, err := ctrl.NewManager(o.Config, ctrl.Options{
		Cache:                  copts,
		Metrics:                metricsserver.Options{BindAddress: o.MetricsListen},
		HealthProbeBindAddress: "0",
		WebhookServer:          crwebhook.NewServer(wopts),
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	// The manager adds its webhook server as a runnable only when asked for
	// it: take it from the manager, never from our own variable.
	server := mgr.GetWebhookServer()
	disc := &discovery.Controller{Options: o.Discovery, OwnNamespace: o.Namespace, Kubelet: discovery.KubeletConfigzFrom(cs)}
	var gate *leaderGate
	if o.LeaderElection {
		gate = &leaderGate{cs: cs, namespace: o.Namespace, name: LeaseName, onElected: disc.Resync,
			lease: o.LeaseDuration, renew: o.RenewDeadline, retry: o.RetryPeriod}
		disc.Leader = gate.Leading
		if err := mgr.Add(gate); err != nil {
			return err
		}
	}
	if err := disc.SetupWithManager(mgr); err != nil {
		return err
	}
	if certs != nil {
		if err := mgr.Add(certs); err != nil {
			return err
		}
	}
	wm := metrics.WebhookOn(ctrlmetrics.Registry)
	h := &Handlers{Policy: policy, Cluster: disc.Current, Namespaces: LiveNamespaces{API: mgr.GetAPIReader(), Cache: mgr.GetClient()}, Upstream: &UpstreamVersions{API: mgr.GetAPIReader()}}
	if policy.Trust != nil {
		bundles, err := NewTrustBundles(mgr)
		if err != nil {
			return err
		}
		tc := &TrustController{Policy: policy.Trust, Bundles: bundles, Metrics: wm}
		if err := tc.SetupWithManager(mgr); err != nil {
			return err
		}
		h.Trust, h.TrustBundle = tc.Current, bundles.Get
		h.CreateTrustBundle = func(ctx context.Context, ns string) (*TrustState, *TrustBundle, error) {
			st, err := tc.Create(ctx, ns)
			if err != nil {
				return nil, nil, err
			}
			b, err := bundles.Live(ctx, ns)
			return st, b, err
		}
	}
	dc := &drift.Controller{Namespace: o.Namespace, Identity: identity(), Expect: h.Expect, Mode: o.StaleRestart,
		Metrics: wm, Interval: o.DriftInterval}
	if gate != nil {
		dc.Leader = gate.Leading
		gate.onElected = func() { disc.Resync(); dc.Resync() }
	}
	np := &netpol.Controller{Namespace: o.Namespace, Options: o.EgressPolicy, Cluster: disc.Current}
	if gate != nil {
		np.Leader = gate.Leading
		gate.onElected = func() { disc.Resync(); dc.Resync(); np.Resync() }
	}
	if err := np.SetupWithManager(mgr); err != nil {
		return err
	}
	// A new cluster NO_PROXY makes pods stale at once and changes the
	// egress policies' ranges: act now.
	disc.OnChange = func(*discovery.Result) { dc.Resync(); np.Resync() }
	if err := dc.SetupWithManager(mgr); err != nil {
		if o.StaleRestart != "" && !slices.Contains([]string{drift.ModeOn, drift.ModeDryRun, drift.ModeOff}, o.StaleRestart) {
			return err
		}
		ctrl.Log.Error(err, "the drift report and restarts are off")
	} else {
		ctrl.Log.Info("drift report", "restarts", dc.Mode)
	}
	server.Register(MutatePath, h.Mutator())
	server.Register(ValidatePath, h.Validator())
	server.Register("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }))
	ready := func() bool { return disc.Current() != nil && (certs == nil || certs.Ready()) }
	server.Register("/readyz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "cluster NO_PROXY not discovered yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	if o.Ready != nil {
		if err := mgr.Add(readyNotifier{mgr: mgr, ready: ready, fn: o.Ready}); err != nil {
			return err
		}
	}
	// Namespaces are read on every admission (live, with this cache as the
	// fallback): warm the informer before serving.
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.Namespace{}); err != nil {
		return fmt.Errorf("namespace informer: %w", err)
	}
	return mgr.Start(ctx)
}

// LeaseName is the Lease the ConfigMap writer is elected with.
const LeaseName = "egret-webhook"

// leaderGate campaigns for the Lease for as long as the process runs: it
// wins, leads, loses (the Lease taken, the API server unreachable past the
// renew deadline) and campaigns again, without stopping anything else.
type leaderGate struct {
	cs                  kubernetes.Interface
	namespace, name     string
	lease, renew, retry time.Duration
	onElected           func()
	leading             atomic.Bool
}

func (g *leaderGate) NeedLeaderElection() bool { return false }

// Leading reports whether this replica holds the Lease now.
func (g *leaderGate) Leading() bool { return g.leading.Load() }

func (g *leaderGate) Start(ctx context.Context) error {
	id := identity()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, g.namespace, g.name,
		g.cs.CoreV1(), g.cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	lg := ctrl.Log.WithName("leader")
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: g.name, ReleaseOnCancel: true,
			LeaseDuration: or(g.lease, 15*time.Second), RenewDeadline: or(g.renew, 10*time.Second), RetryPeriod: or(g.retry, 2*time.Second),
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					lg.Info("leading: writing the NO_PROXY ConfigMaps", "identity", id)
					g.leading.Store(true)
					g.onElected()
				},
				OnStoppedLeading: func() {
					if g.leading.Swap(false) && ctx.Err() == nil {
						lg.Info("lost the lease: admission goes on, ConfigMap writes stop until re-elected", "identity", id)
					}
				},
			},
		})
		if err != nil {
			return err
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends
	}
	return nil
}

// identity names this replica (its host name and a random suffix).
var identity = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	return host + "_" + string(uuid.NewUUID())
})

// readyNotifier calls fn once the webhook server is started and ready.
type readyNotifier struct {
	mgr   ctrl.Manager
	ready func() bool
	fn    func()
}

func (r readyNotifier) NeedLeaderElection() bool { return false }

func (r readyNotifier) Start(ctx context.Context) error {
	check := r.mgr.GetWebhookServer().StartedChecker()
	for {
		if check(nil) == nil && r.ready() {
			r.fn()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ctxTick():
		}
	}
}

func ctxTick() <-chan time.Time { return time.After(50 * time.Millisecond) }

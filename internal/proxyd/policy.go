package proxyd

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/ratelimit"
)

// The wiring of per-workload egress (cfg.Policy) and of the sidecar's
// token credential (cfg.Credentials.TokenFile).

// policySyncWait bounds the wait for the first list of pods and policies:
// the gateway does not serve before it knows them (an empty index would
// give every client the default).
const policySyncWait = 2 * time.Minute

// startPolicy builds the gateway's Workloads from cfg.Policy: the pod
// index and its watch, the TokenReview verifier, the policy watch (which
// writes the policies' status) and the limiter. It returns once the pods
// and the policies are listed, and nil when policies are off. Policies are
// checked against the pools of st until the server runs, then against its
// state in force.
func startPolicy(ctx context.Context, cfg *config.Proxy, p *process, st *proxy.State, log *slog.Logger) (proxy.Workloads, error) {
	pc := cfg.Policy
	if !pc.Enabled {
		return nil, nil
	}
	rc, err := kubeConfig(pc.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	pm := p.m.Policy
	pods := identity.NewPods()
	go identity.Watch(ctx, cs, pods)
	tokens := &identity.Tokens{Reviews: cs.AuthenticationV1().TokenReviews(), Audience: pc.TokenAudience,
		Result: func(r string) { pm.TokenReviews.WithLabelValues(r).Inc() }}
	var lim policy.Limiter = &ratelimit.Local{}
	if addr := pc.RateLimit.Service; addr != "" {
		cc, err := ratelimit.Dial(addr)
		if err != nil {
			return nil, err
		}
		go func() { <-ctx.Done(); cc.Close() }()
		lim = &ratelimit.Service{Client: rls.NewRateLimitServiceClient(cc), Domain: pc.RateLimit.Domain,
			Timeout: pc.RateLimit.Timeout, FailClosed: pc.RateLimit.FailClosed,
			Result: func(r string) { pm.RateLimitCalls.WithLabelValues(r).Inc() }}
	}
	eng := &policy.Engine{Pods: pods, Tokens: tokens, Limiter: lim, Pools: func(name string) bool {
		if s := p.server.Load(); s != nil {
			return s.State().Pools[name] != nil
		}
		return st.Pools[name] != nil
	}, Granted: func(pool, ns string) bool {
		return p.current().Pools[pool].Grants(ns) // the configuration in force
	}}
	if cfg.Intercept != nil {
		// Policies may intercept: their credentials read the Secrets the
		// configuration in force grants, from the API server.
		eng.Intercept = &policy.Secrets{Client: cs, Context: ctx, Logger: log, Grants: func() []string {
			if ic := p.current().Intercept; ic != nil {
				return ic.Secrets
			}
			return nil
		}}
	}
	p.policy = eng
	w := &policy.Watcher{Client: dyn, Engine: eng, Logger: log}
	if err := w.Start(ctx, policySyncWait); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, policySyncWait)
	defer cancel()
	if err := identity.WaitSynced(sctx, pods); err != nil {
		return nil, fmt.Errorf("policy: %w (may this service account list and watch pods?)", err)
	}
	go func() {
		for {
			accepted, invalid := 0, 0
			for _, c := range eng.Policies() {
				if c.Err != nil {
					invalid++
				} else {
					accepted++
				}
			}
			pm.Policies.WithLabelValues("accepted").Set(float64(accepted))
			pm.Policies.WithLabelValues("invalid").Set(float64(invalid))
			pm.Pods.Set(float64(pods.Len()))
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Second):
			}
		}
	}()
	log.Info("per-workload egress on", "pods", pods.Len(), "label_sets", pods.LabelSets(), "policies", len(eng.Policies()),
		"ratelimit_service", pc.RateLimit.Service)
	return Workloads(eng), nil
}

// kubeConfig is the API server's client configuration: the kubeconfig
// file, else in-cluster.
func kubeConfig(path string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if path != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("policy: API server: %w (set EGRET_POLICY_KUBECONFIG outside a cluster)", err)
	}
	// TokenReviews come in bursts when many pods start at once.
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "egret-gateway"
	return rc, nil
}

// Workloads adapts a policy engine to proxy.Options.Workloads.
func Workloads(e *policy.Engine) proxy.Workloads { return engineWorkloads{e} }

type engineWorkloads struct{ e *policy.Engine }

// HasNamespace reports whether a pod of namespace ns is known: a
// destination "name.ns" is then a Service's short name (proxy.ShortNames).
func (w engineWorkloads) HasNamespace(ns string) bool { return w.e.Pods.HasNamespace(ns) }

func (w engineWorkloads) Identify(ctx context.Context, addr netip.Addr, auth string) (proxy.Workload, error) {
	pw, err := w.e.Identify(ctx, addr, auth)
	out := proxy.Workload{By: pw.By, Namespace: pw.Namespace, ServiceAccount: pw.ServiceAccount, Pod: pw.Pod, Note: pw.Note}
	if pw.Rules != nil {
		out.Rules, out.Policy = pw.Rules, pw.Rules.Policy()
	}
	return out, err
}

// startUpstreamToken loads the token file of cfg.Credentials (the store
// pools give members without credentials of their own: the gateway) and
// re-reads it on change until ctx ends. It returns nil when no token file
// is configured.
func startUpstreamToken(ctx context.Context, cfg *config.Proxy, p *process, log *slog.Logger) (*credentialState, error) {
	path := cfg.Credentials.TokenFile
	if path == "" {
		return nil, nil
	}
	cs := &credentialState{dir: path, store: credentials.NewStore(nil)}
	tf := &credentials.TokenFile{Path: path, Interval: cfg.Credentials.CheckInterval, Store: cs.store}
	if err := tf.Load(); err != nil {
		return nil, err
	}
	cs.lastReload = time.Now()
	sent := false
	for _, m := range cfg.Pools[config.DefaultPool].Members {
		sent = sent || (!m.OwnAuth && TokenTarget(m.URL))
	}
	if !sent {
		log.Warn("the upstream token is sent to no member: only the default pool's members (UPSTREAM_PROXY) get it, over https:// or to a Service name or private address", "file", path)
	}
	tf.Reloaded = func(err error) {
		p.m.ConfigReloads.WithLabelValues("token", cs.reloaded(err)).Inc()
		if err != nil {
			log.Error("upstream token not reloaded; the previous one stays in use", "file", path, "error", err.Error())
			return
		}
		log.Debug("upstream token reloaded", "file", path)
	}
	go tf.Run(ctx)
	return cs, nil
}

package proxyd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"k8s.io/client-go/kubernetes"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/proxy"
)

// startIntercept builds the gateway's interception from cfg.Intercept: the
// CA directory (followed for rotation), the origin roots, and the sites
// with their credentials (followed for rotation). Per-request events go to
// the access log. Nil when interception is off.
func startIntercept(ctx context.Context, cfg *config.Proxy, accessLog io.Writer, log *slog.Logger) (*proxy.Interception, error) {
	ic := cfg.Intercept
	if ic == nil {
		return nil, nil
	}
	iss := &intercept.Issuer{}
	ca := &intercept.CADir{Path: ic.CADir, Issuer: iss, Reloaded: func(a *intercept.Authority, err error) {
		if err != nil {
			log.Error("interception CA not reloaded; the previous CA stays in force", "error", err)
			return
		}
		log.Info("interception CA reloaded", "dir", ic.CADir, "fingerprint", a.Fingerprint())
	}}
	var pub *policy.CAPublisher
	if ic.PublishName != "" {
		rc, err := kubeConfig(cfg.Policy.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("intercept.publish_configmap: %w", err)
		}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("intercept.publish_configmap: %w", err)
		}
		pub = &policy.CAPublisher{Client: cs, Namespace: ic.PublishNamespace, Name: ic.PublishName, Logger: log}
		pub.Start(ctx)
		reloaded := ca.Reloaded
		ca.Reloaded = func(a *intercept.Authority, err error) {
			reloaded(a, err)
			if err == nil {
				pub.Publish(a.Trusted)
			}
		}
	}
	a, err := ca.Load()
	if err != nil {
		return nil, fmt.Errorf("%w (mount the interception CA Secret there, or fix intercept.ca_dir)", err)
	}
	log.Info("interception CA loaded", "dir", ic.CADir, "fingerprint", a.Fingerprint())
	if pub != nil {
		pub.Publish(a.Trusted)
	}
	var extra []byte
	if ic.OriginCAFile != "" {
		if extra, err = os.ReadFile(ic.OriginCAFile); err != nil {
			return nil, fmt.Errorf("intercept.origin_ca_file: %w", err)
		}
	}
	roots, err := intercept.OriginRoots(extra)
	if err != nil {
		return nil, fmt.Errorf("intercept.origin_ca_file %s: %w", ic.OriginCAFile, err)
	}
	out := &proxy.Interception{Engine: &intercept.Engine{Issuer: iss, RootCAs: roots}}
	for _, spec := range ic.Sites {
		site, err := intercept.CompileSite(spec, nil)
		if err != nil {
			return nil, err
		}
		for _, c := range site.Credentials {
			c.Reloaded = func(err error) {
				if err != nil {
					log.Error("intercept credential not reloaded; the previous value stays in force", "error", err)
				} else {
					log.Info("intercept credential reloaded", "credential", c.Name)
				}
			}
			if err := c.Load(); err != nil {
				// Requests to the site are answered 503 until it loads.
				log.Error("intercept credential not loaded", "site", site.Name, "error", err)
			}
		}
		go site.Run(ctx)
		out.Sites = append(out.Sites, site)
	}
	go func() {
		if err := ca.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("interception CA watch stopped", "error", err)
		}
	}()
	if accessLog != nil {
		alog := slog.New(slog.NewJSONHandler(accessLog, nil))
		out.Engine.Log = func(ev *intercept.Event) {
			alog.LogAttrs(context.Background(), slog.LevelInfo, "request", ev.Attrs()...)
		}
	}
	return out, nil
}

// InterceptMetrics reads the engine's counts for the metrics (never a
// name, a site or a credential: counts by a fixed set of labels).
func InterceptMetrics(in *proxy.Interception) func() metrics.InterceptSample {
	return func() metrics.InterceptSample {
		es := in.Engine.Stats()
		is := in.Engine.Issuer.Stats()
		hs := map[string]uint64{"ok": es.Handshakes, "exempt": es.Exempt}
		for k, n := range es.HandshakeFailures {
			hs[k] += n
		}
		return metrics.InterceptSample{
			Handshakes: hs, OriginHandshakes: es.OriginHandshakes, OriginResumed: es.Resumed,
			Requests:     map[string]uint64{"allowed": es.Allowed, "denied": es.Denied, "reported": es.Reported, "failed": es.Failed},
			LeavesSigned: is.Signed, LeafCacheHits: is.Hits, LeavesCached: is.Cached,
		}
	}
}

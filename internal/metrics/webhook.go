package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Webhook holds the collectors of `egret webhook`'s own controllers: the
// drift report (pods injected with values that changed since), the
// restarts it makes, and trust bundles egret refuses to mount. The webhook
// serves them beside controller-runtime's metrics.
type Webhook struct {
	// InjectedPods is the number of pods that carry egret's stamp.
	InjectedPods prometheus.Gauge
	// StalePods is the number of injected pods whose stamp differs from
	// what the webhook injects now, by part (stamp.Parts: noproxy, proxy,
	// image, uid, upstream_secret, trust); a pod stale on two parts
	// counts in both.
	StalePods *prometheus.GaugeVec
	// StaleWorkloads is the number of workloads with a stale pod.
	StaleWorkloads prometheus.Gauge
	// DriftSync is when the drift controller last compared every pod
	// (Unix seconds): a report that stops moving is a controller that
	// stopped.
	DriftSync prometheus.Gauge
	// Restarts counts the restarts of stale workloads, by result:
	// restarted, dry_run, blocked_pdb, failed.
	Restarts *prometheus.CounterVec
	// ForeignTrustBundles is the number of opted-in namespaces whose
	// egret-trust-bundle ConfigMap is not the bundle egret wrote (never
	// mounted into a pod).
	ForeignTrustBundles prometheus.Gauge
}

// NewWebhook creates the webhook's collectors, unregistered.
func NewWebhook() *Webhook {
	return &Webhook{
		InjectedPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egret_webhook_injected_pods",
			Help: "Pods that carry egret's injection stamp (annotation egret.io/injected-state), as the drift controller last counted them.",
		}),
		StalePods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egret_webhook_stale_pods",
			Help: "Injected pods whose injected value differs from what the webhook injects now, by part (noproxy, proxy, image, uid, upstream_secret, trust).",
		}, []string{"part"}),
		StaleWorkloads: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egret_webhook_stale_workloads",
			Help: "Workloads (Deployments, StatefulSets, DaemonSets, or bare pods) with at least one stale pod.",
		}),
		DriftSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egret_webhook_drift_sync_timestamp_seconds",
			Help: "When the drift controller (the webhook's leader) last compared every injected pod, in Unix seconds.",
		}),
		Restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egret_webhook_stale_restarts_total",
			Help: "Restarts of stale workloads that opted in, by result (restarted, dry_run, blocked_pdb, failed).",
		}, []string{"result"}),
		ForeignTrustBundles: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egret_webhook_trust_bundle_foreign",
			Help: "Opted-in namespaces whose egret-trust-bundle ConfigMap is not the bundle egret wrote; egret never mounts it.",
		}),
	}
}

// Collectors returns every collector, to register.
func (w *Webhook) Collectors() []prometheus.Collector {
	return []prometheus.Collector{w.InjectedPods, w.StalePods, w.StaleWorkloads, w.DriftSync, w.Restarts, w.ForeignTrustBundles}
}

var (
	webhookOnce sync.Once
	webhook     *Webhook
)

// WebhookOn returns the process's webhook collectors, registered on r the
// first time (controller-runtime's registry, which the webhook's metrics
// listener serves). Every later call returns the same collectors.
func WebhookOn(r prometheus.Registerer) *Webhook {
	webhookOnce.Do(func() {
		webhook = NewWebhook()
		r.MustRegister(webhook.Collectors()...)
	})
	return webhook
}

package lint

const idGatewayReplicas = "gateway-replicas"

// GatewayMinReplicas is the smallest replica count for an egress gateway.
const GatewayMinReplicas = 3

var ruleGatewayReplicas = Rule{
	ID:       idGatewayReplicas,
	Severity: Warning,
	Summary:  "an egress gateway runs fewer than 3 replicas",
	Help: "Every pod routed through the gateway loses its outside connectivity when the gateway does. " +
		"Run at least 3 replicas (or an HorizontalPodAutoscaler with minReplicas: 3), so that one node drain and " +
		"one failure at the same time still leave a replica serving.",
	set: checkGatewayReplicas,
}

func checkGatewayReplicas(c *check) {
	for _, w := range c.gateways() {
		if w.pod.ignored(idGatewayReplicas) {
			continue
		}
		n := int32(1)
		if w.replicas != nil {
			n = *w.replicas
		}
		if n >= GatewayMinReplicas {
			continue
		}
		if h := c.hpaOf(w); h != nil && h.hpa.Spec.MinReplicas != nil && *h.hpa.Spec.MinReplicas >= GatewayMinReplicas {
			continue
		}
		c.report(idGatewayReplicas, Warning, w.obj, "spec.replicas",
			"egress gateway %s runs %d replica(s): set spec.replicas to at least %d so a drain or a crash does not cut every routed pod off", w.ref, n, GatewayMinReplicas)
	}
}

// hpaOf returns the HorizontalPodAutoscaler that scales w, or nil.
func (c *check) hpaOf(w *workload) *hpa {
	for _, h := range c.hpas {
		t := h.hpa.Spec.ScaleTargetRef
		if sameNS(h.obj.Namespace, w.ref.Namespace) && t.Kind == w.ref.Kind && t.Name == w.ref.Name {
			return h
		}
	}
	return nil
}

package lint

const idGatewayAntiAffinity = "gateway-anti-affinity"

var ruleGatewayAntiAffinity = Rule{
	ID:       idGatewayAntiAffinity,
	Severity: Warning,
	Summary:  "an egress gateway has no pod anti-affinity or topology spread",
	Help: "Without `podAntiAffinity` (or `topologySpreadConstraints`) the scheduler may put every gateway " +
		"replica on one node, and one node failure takes the cluster's egress down. Add a preferred or required " +
		"pod anti-affinity on `kubernetes.io/hostname` matching the gateway's labels.",
	set: checkGatewayAntiAffinity,
}

func checkGatewayAntiAffinity(c *check) {
	for _, w := range c.gateways() {
		if w.pod.ignored(idGatewayAntiAffinity) || hasAntiAffinity(w.spec) {
			continue
		}
		c.report(idGatewayAntiAffinity, Warning, w.obj, w.specPath,
			"egress gateway %s has no pod anti-affinity, so its replicas may share a node: add affinity.podAntiAffinity on kubernetes.io/hostname (or topologySpreadConstraints)", w.ref)
	}
}

package lint

const idGatewayPDB = "gateway-pdb"

var ruleGatewayPDB = Rule{
	ID:       idGatewayPDB,
	Severity: Warning,
	Summary:  "an egress gateway has no PodDisruptionBudget",
	Help: "Without a PodDisruptionBudget a node drain may evict every gateway replica at once. Add one that " +
		"selects the gateway's pods with `minAvailable: 2` (for 3 replicas) or `maxUnavailable: 1`.",
	set: checkGatewayPDB,
}

func checkGatewayPDB(c *check) {
	for _, w := range c.gateways() {
		if w.pod.ignored(idGatewayPDB) {
			continue
		}
		found := false
		for _, p := range c.pdbs {
			if selects(p.pdb.Spec.Selector, p.obj.Namespace, w) {
				found = true
				break
			}
		}
		if !found {
			c.report(idGatewayPDB, Warning, w.obj, "",
				"egress gateway %s has no PodDisruptionBudget, so a drain may evict every replica at once: add one selecting its pods with minAvailable: 2", w.ref)
		}
	}
}

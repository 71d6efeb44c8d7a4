package lint

import (
	"strings"
	"testing"
)

const gwDeploy = `apiVersion: apps/v1
kind: Deployment
metadata: {name: gw, namespace: egress}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: gw}}
  template:
    metadata: {labels: {app: gw}}
    spec:
      AFFINITY
      containers:
      - name: squid
        image: ubuntu/squid:6.6
        ports: [{containerPort: 3128}]
---
apiVersion: v1
kind: Service
metadata: {name: gw, namespace: egress}
spec:
  selector: {app: gw}
  clusterIP: 10.96.7.7
  ports: [{port: 3128}]
`

const gwPDB = `---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: gw, namespace: egress}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: gw}}
`

const appUsingGW = `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: team}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
      - name: app
        image: busybox
        env:
        - {name: HTTPS_PROXY, value: "http://PROXYHOST:3128"}
        - {name: https_proxy, value: "http://PROXYHOST:3128"}
        - {name: NO_PROXY, value: "localhost,127.0.0.1,::1,.svc,.cluster.local,kubernetes,kubernetes.default,kubernetes.default.svc,169.254.169.254"}
        - {name: no_proxy, value: "localhost,127.0.0.1,::1,.svc,.cluster.local,kubernetes,kubernetes.default,kubernetes.default.svc,169.254.169.254"}
`

func policyYAML(egress string) string {
	return `---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np, namespace: team}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
` + egress
}

const spread = `topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: gw}}}]`

func TestSetRules(t *testing.T) {
	gw := func(replicas, affinity string) string {
		return strings.NewReplacer("REPLICAS", replicas, "AFFINITY", affinity).Replace(gwDeploy)
	}
	app := func(host string) string { return strings.ReplaceAll(appUsingGW, "PROXYHOST", host) }
	for _, tc := range []struct {
		name, in string
		want     []string
		wantIn   string
	}{
		{name: "squid-behind-3128-service-is-a-gateway", in: gw("1", ""), want: []string{idGatewayAntiAffinity, idGatewayPDB, idGatewayReplicas}},
		{name: "complete-gateway-quiet", in: gw("3", spread) + gwPDB},
		{name: "hpa-min-replicas-counts", in: gw("1", spread) + gwPDB + `---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: gw, namespace: egress}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: gw}
  minReplicas: 3
  maxReplicas: 6
`},
		{name: "ignore-annotation", in: strings.Replace(gw("1", spread), "metadata: {name: gw, namespace: egress}", "metadata: {name: gw, namespace: egress, annotations: {lint.egret.io/ignore: gateway-replicas}}", 1) + gwPDB},
		{name: "app-via-service-fqdn-without-policy", in: gw("3", spread) + gwPDB + app("gw.egress.svc.cluster.local"), want: []string{idGatewayNetworkPolicy}, wantIn: "no NetworkPolicy restricts its egress"},
		{name: "app-via-cluster-ip", in: gw("3", spread) + gwPDB + app("10.96.7.7"), want: []string{idGatewayNetworkPolicy}},
		{name: "short-name-from-other-namespace-is-not-the-gateway", in: gw("3", spread) + gwPDB + app("gw")},
		{name: "policy-allowing-everything", in: gw("3", spread) + gwPDB + app("gw.egress") + policyYAML("  - to: [{ipBlock: {cidr: 0.0.0.0/0}}]\n"),
			want: []string{idEgressPolicyCoverage, idGatewayNetworkPolicy}, wantIn: "allows egress to any address"},
		{name: "policy-confines", in: gw("3", spread) + gwPDB + app("gw.egress.svc") + policyYAML("  - ports: [{port: 53, protocol: UDP}]\n  - to: [{ipBlock: {cidr: 10.0.0.0/8}}]\n"),
			// DNS to any address: confined for gateway-network-policy, but public DNS is open.
			want: []string{idEgressPolicyCoverage}, wantIn: "allows outside DNS 8.8.8.8 UDP/53"},
		{name: "policy-exact", in: gw("3", spread) + gwPDB + app("gw.egress.svc") + policyYAML("  - to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, podSelector: {matchLabels: {k8s-app: kube-dns}}}]\n    ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]\n  - to: [{namespaceSelector: {}}, {ipBlock: {cidr: 10.0.0.0/8}}]\n")},
		{name: "policy-in-other-namespace-does-not-count", in: gw("3", spread) + gwPDB + app("gw.egress.svc") + strings.Replace(policyYAML("  - to: [{ipBlock: {cidr: 10.0.0.0/8}}]\n"), "namespace: team", "namespace: other", 1),
			want: []string{idGatewayNetworkPolicy}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Read("in.yaml", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			fs, err := Check(objs, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(ruleIDs(fs), ","); got != strings.Join(tc.want, ",") {
				t.Fatalf("rules = %s, want %v\n%s", got, tc.want, textOf(fs))
			}
			if tc.wantIn != "" && !strings.Contains(textOf(fs), tc.wantIn) {
				t.Errorf("no message contains %q:\n%s", tc.wantIn, textOf(fs))
			}
			for _, f := range fs {
				if f.Line <= 0 {
					t.Errorf("finding %s has no line", f.Rule)
				}
			}
		})
	}
}

package policy

import (
	"context"
	"testing"

	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/route"
)

// FuzzCompile: any policy a user can apply compiles without a panic; an
// invalid one denies every destination to the pods it selects, and an
// accepted one decides any destination.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`{metadata: {name: p, namespace: ns}, spec: {egress: [{action: allow, hosts: [a.example], ports: [443], pool: critical}]}}`,
		`{metadata: {name: p, namespace: ns}, spec: {default: allow, egress: [{action: deny, suffixes: [.evil.example, example.org]}]}}`,
		`{metadata: {name: p, namespace: ns}, spec: {egress: [{action: allow, cidrs: [10.0.0.0/8, "::1", 10.0.0.0/33]}]}}`,
		`{metadata: {name: p, namespace: ns}, spec: {mode: report, sni: enforce, limits: {requests: 5, unit: hour, maxConcurrent: 2}}}`,
		`{metadata: {name: p, namespace: ns}, spec: {podSelector: {matchExpressions: [{key: app, operator: In, values: [a]}]}}}`,
		`{metadata: {name: p, namespace: ns}, spec: {podSelector: {matchExpressions: [{key: "", operator: Near}]}}}`,
		`{metadata: {name: p, namespace: ns}, spec: {egress: [{action: allow, hosts: ["*", "a b", "[::1]"], ports: [0, 65536]}]}}`,
		`{metadata: {name: default}, spec: {egress: [{action: deny, hosts: [x]}]}}`,
		`{metadata: {name: p, namespace: ns}, spec: {default: allow, intercept: [{hosts: [a.example, "*.b.example"], exempt: [p.b.example], credentials: [{secret: k, scheme: basic, keys: [u, p]}], http: {mode: report, rules: [{action: deny, methods: [DELETE], paths: ["/v1/**"], pathPrefixes: [/admin]}]}}]}}`,
		`{metadata: {name: p, namespace: ns}, spec: {intercept: [{hosts: [""], credentials: [{secret: other/k, scheme: raw, header: Host}], http: {rules: [{action: maybe, paths: ["x?y"]}]}}]}}`,
		`{metadata: {name: default}, spec: {intercept: [{hosts: [a.example], credentials: [{secret: ns/k}]}]}}`,
	} {
		f.Add(s, false)
	}
	f.Add(`{metadata: {name: default}, spec: {egress: [{action: deny, hosts: [x]}]}}`, true)
	dests := []string{"a.example:443", "x.evil.example:80", "10.1.2.3:5432", "[::1]:443", "localhost:1"}
	f.Fuzz(func(t *testing.T, doc string, cluster bool) {
		var p EgressPolicy
		if yaml.Unmarshal([]byte(doc), &p) != nil {
			return
		}
		c := Compile(&p, cluster, func(n string) bool { return n == "critical" })
		_ = Condition(c)
		e := combine([]*Compiled{c}, "k", nil)
		for _, d := range dests {
			dest, err := route.ParseDest(d, 0)
			if err != nil {
				t.Fatal(err)
			}
			dec := e.Decide(context.Background(), dest, nil)
			if c.Err != nil && dec.Action != route.Deny {
				t.Fatalf("invalid policy (%v) let %s through: %+v", c.Err, d, dec)
			}
			if c.Err != nil && e.InterceptSite(dest.Host) != nil {
				t.Fatalf("invalid policy (%v) intercepts %s", c.Err, d)
			}
		}
	})
}

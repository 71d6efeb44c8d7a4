package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLimits: what a tenant writes is bounded (docs/policy.md, "Limits"),
// and what is beyond a limit is refused with the condition reason
// LimitExceeded and a message that names the limit; the oldest policies
// are kept, and room freed admits the next.
func TestLimits(t *testing.T) {
	hosts := func(n int) string {
		hs := make([]string, n)
		for i := range hs {
			hs[i] = fmt.Sprintf("h%d.example", i)
		}
		return "[" + strings.Join(hs, ", ") + "]"
	}
	rules := func(n int) string {
		rs := make([]string, n)
		for i := range rs {
			rs[i] = "{action: allow, hosts: [a.example]}"
		}
		return "[" + strings.Join(rs, ", ") + "]"
	}
	for _, tc := range []struct{ name, spec, want string }{
		{"hosts", `{egress: [{action: allow, hosts: ` + hosts(MaxEntries+1) + `}]}`, "egress[0].hosts: 1025 entries, more than the limit of 1024 per rule"},
		{"suffixes", `{egress: [{action: allow, suffixes: ` + hosts(MaxEntries+1) + `}]}`, "egress[0].suffixes: 1025 entries"},
		{"rules", `{egress: ` + rules(MaxRules+1) + `}`, "257 rules, more than the limit of 256 rules per policy"},
		{"size", `{egress: ` + strings.Repeat("", 0) + `[` + strings.TrimSuffix(strings.Repeat(`{action: allow, hosts: `+hosts(1000)+`}, `, 30), ", ") + `]}`, "bytes per policy"},
	} {
		c := Compile(parse(t, `{metadata: {name: p, namespace: ns}, spec: `+tc.spec+`}`), false, nil)
		if c.Reason != ReasonLimitExceeded || !strings.Contains(Condition(c).Message, tc.want) {
			t.Errorf("%s: reason %s, message %q, want %q", tc.name, c.Reason, Condition(c).Message, tc.want)
		}
	}

	var reported []string
	e := &Engine{MaxPerNamespace: 2, MaxBytes: 3 * 107, Changed: func(c *Compiled) { reported = append(reported, c.Key+"="+c.Reason) }}
	t0 := time.Unix(1e9, 0)
	set := func(ns, name string, age int) *Compiled {
		p := parse(t, `{metadata: {name: `+name+`, namespace: `+ns+`}, spec: {egress: [{action: allow, hosts: [aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example]}]}}`) // 107 bytes
		p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(age) * time.Second))
		return e.Set(p, false)
	}
	set("a", "p1", 1)
	set("a", "p2", 2)
	if c := set("a", "p3", 3); c.Reason != ReasonLimitExceeded || !strings.Contains(Condition(c).Message, "namespace a has more than 2 EgressPolicies") {
		t.Errorf("third in a namespace of 2: %s %q", c.Reason, Condition(c).Message)
	}
	if c := set("b", "p1", 4); c.Reason != ReasonValid {
		t.Errorf("b/p1: %s", Condition(c).Message)
	}
	if c := set("c", "p1", 5); c.Reason != ReasonLimitExceeded || !strings.Contains(Condition(c).Message, "limit of 321 (total policy size") {
		t.Errorf("over the total: %s %q", c.Reason, Condition(c).Message)
	}
	// An older policy arriving later (a relist in another order) is kept,
	// and the newest is refused: every replica agrees.
	if c := set("d", "old", 0); c.Reason != ReasonValid {
		t.Errorf("the oldest: %s", Condition(c).Message)
	}
	byKey := map[string]string{}
	for _, c := range e.Policies() {
		byKey[c.Key] = c.Reason
	}
	if byKey["b/p1"] != ReasonLimitExceeded || byKey["a/p1"] != ReasonValid {
		t.Errorf("after an older one arrived: %v", byKey)
	}
	// Deleting frees room: a/p3 comes into force and is reported.
	reported = nil
	e.Delete("a", "p1", false)
	if got := strings.Join(reported, " "); !strings.Contains(got, "a/p3=Valid") {
		t.Errorf("after a delete, reported %q, want a/p3=Valid", got)
	}
}

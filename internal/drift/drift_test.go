package drift

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"egret.io/egret/internal/stamp"
)

func stamped(ns, name, mode, noProxy string, wl Ref) PodInfo {
	s := stamp.Stamp{Mode: mode, NoProxy: stamp.Hash(noProxy), Proxy: "http://gw:3128"}
	if mode != "gateway" {
		s.Image, s.ProxyUID = "egret:1", stamp.UID(15337)
	}
	return PodInfo{Namespace: ns, Name: name, Annotations: map[string]string{stamp.Annotation: s.Encode()}, Workload: wl}
}

func TestCompare(t *testing.T) {
	web := Ref{Kind: "Deployment", Namespace: "shop", Name: "web"}
	db := Ref{Kind: "StatefulSet", Namespace: "shop", Name: "db"}
	pods := []PodInfo{
		stamped("shop", "web-1", "sidecar", "old", web),
		stamped("shop", "web-2", "sidecar", "new", web),
		stamped("shop", "db-0", "gateway", "old", db),
		stamped("batch", "job-x", "gateway", "new", Ref{Kind: "Job", Namespace: "batch", Name: "x"}),
		{Namespace: "shop", Name: "legacy", Annotations: map[string]string{}, Workload: web},
	}
	expect := func(_ context.Context, ns string, s stamp.Stamp, _ map[string]string) (stamp.Current, bool) {
		c := stamp.Current{NoProxy: stamp.Hash("new"), Proxy: "http://gw:3128"}
		if s.Mode != "gateway" {
			c.Image, c.ProxyUID = "egret:2", stamp.UID(15337)
		}
		return c, true
	}
	r := Compare(context.Background(), pods, expect)
	if r.InjectedPods != 5 || r.Unstamped != 1 || r.StalePods != 3 {
		t.Fatalf("counts: %+v", r)
	}
	if r.ByPart[stamp.PartNoProxy] != 2 || r.ByPart[stamp.PartImage] != 2 {
		t.Errorf("by part: %v", r.ByPart)
	}
	if len(r.Workloads) != 2 || r.Workloads[0].Ref != web || r.Workloads[0].StalePods != 2 ||
		!slices.Equal(r.Workloads[0].Parts, []stamp.Part{stamp.PartNoProxy, stamp.PartImage}) || r.Workloads[1].Ref != db {
		t.Errorf("workloads: %+v", r.Workloads)
	}
	names := []string{}
	for _, p := range r.Pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if !slices.Equal(names, []string{"shop/db-0", "shop/web-1", "shop/web-2"}) {
		t.Errorf("pods %v", names)
	}
	back, err := ParseReport(r.Encode())
	if err != nil || back.Encode() != r.Encode() {
		t.Errorf("report round trip: %v", err)
	}
	// Before discovery nothing is known, so nothing is stale.
	none := Compare(context.Background(), pods, func(context.Context, string, stamp.Stamp, map[string]string) (stamp.Current, bool) {
		return stamp.Current{}, false
	})
	if none.StalePods != 0 || len(none.Unknown) != 1 {
		t.Errorf("unknown values: %+v", none)
	}
}

func TestCompareCaps(t *testing.T) {
	var pods []PodInfo
	for i := range MaxPods + 7 {
		pods = append(pods, stamped("ns", strings.Repeat("p", 1+i%40)+string(rune('a'+i%26))+time.Duration(i).String(), "gateway", "old", Ref{Kind: "Pod", Namespace: "ns", Name: time.Duration(i).String()}))
	}
	r := Compare(context.Background(), pods, func(context.Context, string, stamp.Stamp, map[string]string) (stamp.Current, bool) {
		return stamp.Current{NoProxy: "x"}, true
	})
	if r.StalePods != MaxPods+7 || len(r.Pods) != MaxPods || r.MorePods != 7 || len(r.Workloads) != MaxWorkloads || r.MoreWorkloads != 7 {
		t.Errorf("stale %d, listed %d (+%d), workloads %d (+%d)", r.StalePods, len(r.Pods), r.MorePods, len(r.Workloads), r.MoreWorkloads)
	}
	if n := len(r.Encode()); n > 512<<10 {
		t.Errorf("a full report is %d bytes", n)
	}
}

func TestPlan(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tgt := func(name, opt string, edit func(*Target)) Target {
		t := Target{Workload: Workload{Ref: Ref{Kind: "Deployment", Namespace: "shop", Name: name}}, OptIn: opt, MaxUnavailable: 1}
		if edit != nil {
			edit(&t)
		}
		return t
	}
	targets := []Target{
		tgt("not-opted", "", nil),
		tgt("job", OptInOn, func(t *Target) { t.Unrestartable = "a Job is not restarted" }),
		tgt("busy", OptInOn, func(t *Target) { t.NotReady = "a rollout is in progress" }),
		tgt("guarded", OptInOn, func(t *Target) { t.PDBs = []PDB{{Name: "web-pdb", DisruptionsAllowed: 0}} }),
		tgt("recent", OptInOn, func(t *Target) { t.LastRestart = now.Add(-10 * time.Minute) }),
		tgt("trial", OptInDryRun, nil),
		tgt("first", OptInOn, func(t *Target) { t.PDBs = []PDB{{Name: "ok", DisruptionsAllowed: 1}} }),
		tgt("second", OptInOn, nil),
		tgt("surge-only", OptInOn, func(t *Target) { t.MaxUnavailable = 0; t.PDBs = []PDB{{Name: "tight", DisruptionsAllowed: 0}} }),
	}
	chosen, states := Plan(ModeOn, targets, now)
	if chosen != 6 {
		t.Fatalf("chose %d (%v)", chosen, states)
	}
	want := []string{"", "not restartable: a Job", "waiting: a rollout is in progress",
		"blocked: PodDisruptionBudget web-pdb allows 0 disruption(s), the rollout may take down 1 pod(s) at once",
		"waiting: restarted 10m0s ago", StateDryRun, StateRestarting, StateQueued, StateQueued}
	for i, w := range want {
		if !strings.HasPrefix(states[i], w) {
			t.Errorf("%s: state %q, want %q", targets[i].Name, states[i], w)
		}
	}
	if c, st := Plan(ModeDryRun, targets, now); c != -1 || st[6] != StateDryRun {
		t.Errorf("dry-run mode chose %d, %q", c, st[6])
	}
	if c, st := Plan(ModeOff, targets, now); c != -1 || !strings.Contains(st[7], "restarts are off") {
		t.Errorf("off: %d %q", c, st[7])
	}
	if c, st := Plan(ModeNotPermitted, targets, now); c != -1 || !strings.Contains(st[7], "RBAC") {
		t.Errorf("not permitted: %d %q", c, st[7])
	}
}

func TestParseOptIn(t *testing.T) {
	for in, want := range map[string]string{"true": OptInOn, "dry-run": OptInDryRun, "false": "", "": "", "On": OptInOn} {
		if got, err := ParseOptIn(in); err != nil || got != want {
			t.Errorf("ParseOptIn(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseOptIn("yes please"); err == nil || !strings.Contains(err.Error(), "want true, dry-run or false") {
		t.Errorf("bad value: %v", err)
	}
}

func TestDeploymentMaxUnavailable(t *testing.T) {
	d := func(strategy appsv1.DeploymentStrategy) *appsv1.Deployment {
		return &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Strategy: strategy}}
	}
	ru := func(u, s intstr.IntOrString) appsv1.DeploymentStrategy {
		return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &u, MaxSurge: &s}}
	}
	for _, tc := range []struct {
		name     string
		d        *appsv1.Deployment
		replicas int32
		want     int32
	}{
		{"defaults-25pct-of-10", d(appsv1.DeploymentStrategy{}), 10, 2},
		{"defaults-of-3-rounds-down", d(appsv1.DeploymentStrategy{}), 3, 0},
		{"surge-only", d(ru(intstr.FromInt32(0), intstr.FromInt32(1))), 5, 0},
		{"both-zero-is-one", d(ru(intstr.FromInt32(0), intstr.FromInt32(0))), 5, 1},
		{"absolute", d(ru(intstr.FromInt32(2), intstr.FromString("25%"))), 5, 2},
	} {
		if got := deploymentMaxUnavailable(tc.d, tc.replicas); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

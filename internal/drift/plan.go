package drift

import (
	"fmt"
	"strings"
	"time"
)

// Opt-in values of RestartAnnotation.
const (
	// RestartAnnotation on a workload (Deployment, StatefulSet, DaemonSet)
	// or its namespace opts it in to restarts of stale pods: "true",
	// "dry-run" (report what would be restarted) or "false". The
	// workload's wins.
	RestartAnnotation = "egret.io/restart-stale"
	OptInOn           = "on"
	OptInDryRun       = "dry-run"
)

// Restart modes (--stale-restart).
const (
	ModeOn           = "on"      // honour the opt-ins
	ModeDryRun       = "dry-run" // report, never patch
	ModeOff          = "off"
	ModeNotPermitted = "not-permitted" // RBAC forbids patching workloads
)

// ParseOptIn reads a RestartAnnotation value: "on", "dry-run" or "" (no).
func ParseOptIn(v string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "on", "enabled":
		return OptInOn, nil
	case "dry-run":
		return OptInDryRun, nil
	case "false", "off", "disabled", "":
		return "", nil
	}
	return "", fmt.Errorf("%s %q: want true, dry-run or false", RestartAnnotation, v)
}

// PDB is one PodDisruptionBudget that selects a workload's pods.
type PDB struct {
	Name               string
	DisruptionsAllowed int32
}

// Target is what the restarter knows of one stale workload.
type Target struct {
	Workload
	// OptIn is the workload's opt-in ("on", "dry-run", "").
	OptIn string
	// Unrestartable says why changing the pod template would not restart
	// it (a Job, a bare pod, an OnDelete update strategy); "" when it can.
	Unrestartable string
	// NotReady says why the workload is not at rest (a rollout in
	// progress, replicas unavailable); "" when it is.
	NotReady string
	// MaxUnavailable is how many pods its rollout may take down at once.
	MaxUnavailable int32
	// PDBs select its pods.
	PDBs []PDB
	// LastRestart is when egret last restarted it (zero: never).
	LastRestart time.Time
}

// States of a workload in the Report.
const (
	StateRestarting = "restarting"
	StateDryRun     = "would restart (dry run)"
	StateQueued     = "queued: one workload is restarted at a time"
)

// Cooldown is how long egret leaves a workload it restarted before it
// restarts it again.
const Cooldown = time.Hour

// Plan picks the next workload to restart: the first of targets (in order)
// that opted in, can be restarted, is at rest, was not restarted within
// Cooldown, and whose rollout no PodDisruptionBudget forbids — a PDB
// allows it when its disruptionsAllowed covers the pods the rollout may
// take down at once (a surge-only rollout takes none). It returns the
// chosen one's index (-1: none) and every target's state. Dry-run targets
// are never chosen; they are marked StateDryRun.
func Plan(mode string, targets []Target, now time.Time) (int, []string) {
	states := make([]string, len(targets))
	chosen := -1
	for i, t := range targets {
		switch {
		case t.OptIn == "":
			continue
		case mode == ModeOff:
			states[i] = "not restarted: restarts are off (--stale-restart=off)"
		case mode == ModeNotPermitted:
			states[i] = "not restarted: egret may not patch workloads (RBAC)"
		case t.Unrestartable != "":
			states[i] = "not restartable: " + t.Unrestartable
		case !t.LastRestart.IsZero() && now.Sub(t.LastRestart) < Cooldown:
			states[i] = fmt.Sprintf("waiting: restarted %s ago (once an hour at most)", now.Sub(t.LastRestart).Round(time.Minute))
		case t.NotReady != "":
			states[i] = "waiting: " + t.NotReady
		default:
			if why := blocked(t); why != "" {
				states[i] = "blocked: " + why
				continue
			}
			switch {
			case t.OptIn == OptInDryRun || mode == ModeDryRun:
				states[i] = StateDryRun
			case chosen < 0:
				chosen, states[i] = i, StateRestarting
			default:
				states[i] = StateQueued
			}
		}
	}
	return chosen, states
}

// blocked says which PodDisruptionBudget forbids t's rollout, or "".
func blocked(t Target) string {
	if t.MaxUnavailable <= 0 {
		return ""
	}
	for _, p := range t.PDBs {
		if p.DisruptionsAllowed < t.MaxUnavailable {
			return fmt.Sprintf("PodDisruptionBudget %s allows %d disruption(s), the rollout may take down %d pod(s) at once", p.Name, p.DisruptionsAllowed, t.MaxUnavailable)
		}
	}
	return ""
}

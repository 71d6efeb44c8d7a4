package drift

import (
	"encoding/json"
	"fmt"
	"time"

	"egret.io/egret/internal/stamp"
)

// Where the Report is published: ConfigMap ConfigMapName in egret's
// namespace, key ReportKey.
const (
	ConfigMapName = "egret-drift"
	ReportKey     = "report.json"
)

// Caps on what a Report lists (a ConfigMap holds at most 1 MiB); the
// counts stay exact.
const (
	MaxPods      = 500
	MaxWorkloads = 500
	maxRecent    = 20
)

// Ref names a workload: Deployment, StatefulSet, DaemonSet, Job, or Pod
// for a pod no controller owns.
type Ref struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// String is kind/namespace/name.
func (r Ref) String() string { return r.Kind + "/" + r.Namespace + "/" + r.Name }

// Restartable reports whether egret can restart the workload by changing
// its pod template.
func (r Ref) Restartable() bool {
	switch r.Kind {
	case "Deployment", "StatefulSet", "DaemonSet":
		return true
	}
	return false
}

// Pod is one stale pod.
type Pod struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Workload  Ref          `json:"workload"`
	Mode      string       `json:"mode"`
	Parts     []stamp.Part `json:"parts"`
	Created   time.Time    `json:"created"`
}

// Workload is one workload with stale pods.
type Workload struct {
	Ref
	StalePods int          `json:"stalePods"`
	Parts     []stamp.Part `json:"parts"`
	// Restart is the workload's opt-in: "on", "dry-run" or "" (none).
	Restart string `json:"restart,omitempty"`
	// State says what egret does about it (see the State constants and
	// their variations with a reason).
	State string `json:"state,omitempty"`
}

// Report is the drift controller's view of the injected pods.
type Report struct {
	// Updated is when the pods were last compared.
	Updated time.Time `json:"updated"`
	// Leader is the replica that compared them.
	Leader string `json:"leader,omitempty"`
	// InjectedPods counts the pods with egret's label; Unstamped those of
	// them without a readable stamp (injected by an egret before stamps).
	InjectedPods int `json:"injectedPods"`
	Unstamped    int `json:"unstamped,omitempty"`
	// StalePods counts the stale pods; ByPart per part (a pod stale on two
	// parts counts in both).
	StalePods int                `json:"stalePods"`
	ByPart    map[stamp.Part]int `json:"byPart,omitempty"`
	// Unknown says which current values were not known, so not compared
	// (e.g. the cluster NO_PROXY before discovery ran).
	Unknown []string `json:"unknown,omitempty"`
	// Workloads are the workloads with stale pods (at most MaxWorkloads;
	// MoreWorkloads counts the rest).
	Workloads     []Workload `json:"workloads,omitempty"`
	MoreWorkloads int        `json:"moreWorkloads,omitempty"`
	// Pods are the stale pods (at most MaxPods; MorePods counts the rest).
	Pods     []Pod `json:"pods,omitempty"`
	MorePods int   `json:"morePods,omitempty"`
	// Restarts is what the restarter is doing.
	Restarts Restarts `json:"restarts"`
}

// Restarts is the restarter's state, kept in the Report so that a new
// leader goes on where the last one stopped.
type Restarts struct {
	// Mode is on, dry-run, off, or not-permitted (RBAC).
	Mode string `json:"mode"`
	// Current is the workload being restarted, until its rollout is done.
	Current *Restart `json:"current,omitempty"`
	// Paused says why no restart starts (a rollout that did not finish).
	Paused string `json:"paused,omitempty"`
	// Recent are the last restarts, newest first.
	Recent []Restart `json:"recent,omitempty"`
}

// Restart is one restart of a workload.
type Restart struct {
	Ref
	Parts    []stamp.Part `json:"parts"`
	Started  time.Time    `json:"started"`
	Finished time.Time    `json:"finished,omitempty"`
	// Result is restarted, dry_run or failed (the metric's values).
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

// Encode returns the report as the ConfigMap's value.
func (r *Report) Encode() string {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil { // a Report always marshals
		panic(err)
	}
	return string(b)
}

// ParseReport reads a ConfigMap value.
func ParseReport(v string) (*Report, error) {
	var r Report
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return nil, fmt.Errorf("drift report: %w", err)
	}
	return &r, nil
}

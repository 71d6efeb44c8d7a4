package kubenode

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"egret.io/egret/internal/noproxy"
)

// ProxyVars are the variables Inspect reports and compares.
var ProxyVars = []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"}

// InspectOptions select the process and what to check.
type InspectOptions struct {
	// PID is the process to inspect; 0 means: find it by Process.
	PID int
	// Process is the process name to look for when PID is 0.
	Process string
	// Runtime names the daemon (its unit and restart command); "" when
	// unknown (then Unit must be set for the drop-in comparison).
	Runtime Runtime
	// Unit is the systemd unit to compare with; "" means Runtime's unit, or
	// "<process>.service".
	Unit string
	// Registries are registry hosts (host or host:port) the process must
	// reach directly.
	Registries []string
	// ExpectProxy makes a process without any proxy variable a problem.
	ExpectProxy bool
	// Proc reads /proc; UnitDirs is the unit search path (nil: DefaultUnitDirs).
	Proc     Proc
	UnitDirs []string
}

// Decision is what the process does for one registry.
type Decision struct {
	Registry string `json:"registry"`
	URL      string `json:"url"`      // the URL the decision is for (https://host/v2/)
	Decision string `json:"decision"` // "direct", "proxy" or "error"
	Proxy    string `json:"proxy,omitempty"`
	Reason   string `json:"reason"`
	OK       bool   `json:"ok"`
	Advice   string `json:"advice,omitempty"`
}

// Drift is one proxy variable whose live value differs from the unit's.
type Drift struct {
	Name          string `json:"name"`
	Live          string `json:"live"`
	LiveSet       bool   `json:"liveSet"` // false: the process does not have the variable
	Configured    string `json:"configured"`
	ConfiguredSet bool   `json:"configuredSet"` // false: the unit does not set it
}

// Report is the result of Inspect. Proxy URLs in it are redacted.
type Report struct {
	PID       int               `json:"pid"`
	Process   string            `json:"process"`
	Unit      string            `json:"unit,omitempty"`
	Started   time.Time         `json:"started,omitzero"`
	Env       map[string]string `json:"env"` // proxy variables only
	Decisions []Decision        `json:"registries"`
	// APIServer is what a kubelet does with its API server (the server of
	// its --kubeconfig): it must go direct. Nil for other processes and a
	// standalone kubelet.
	APIServer *Decision `json:"apiServer,omitempty"`
	UnitFiles []string  `json:"unitFiles"`
	Drift     []Drift   `json:"drift"`
	// ChangedAfterStart names a unit or environment file modified after the
	// process started ("" when none).
	ChangedAfterStart string   `json:"changedAfterStart,omitempty"`
	Problems          []string `json:"problems"`
}

// OK reports whether the check found no problem.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Inspect reads the process's environment and checks it.
func Inspect(o InspectOptions) (*Report, error) {
	pid := o.PID
	if pid == 0 {
		if o.Process == "" {
			return nil, errors.New("give a pid or a process name")
		}
		pids, err := o.Proc.Find(o.Process)
		if err != nil {
			return nil, err
		}
		if len(pids) > 1 {
			return nil, fmt.Errorf("several processes are named %s (pids %s): choose one with --pid", o.Process, joinInts(pids))
		}
		pid = pids[0]
	}
	env, err := o.Proc.Environ(pid)
	if err != nil {
		return nil, err
	}
	r := &Report{PID: pid, Process: o.Proc.Name(pid), Started: o.Proc.Started(pid), Env: map[string]string{}, Drift: []Drift{}, Problems: []string{}, UnitFiles: []string{}, Decisions: []Decision{}}
	live := map[string]string{}
	for _, n := range ProxyVars {
		if v, ok := env[n]; ok {
			live[n] = v
			r.Env[n] = redactValue(n, v)
		}
	}
	restart := "restart the process"
	switch {
	case o.Unit != "":
		r.Unit = o.Unit
	case o.Runtime != "":
		r.Unit = o.Runtime.Unit()
	case o.Process != "":
		r.Unit = o.Process + ".service"
	}
	if r.Unit != "" {
		restart = "run systemctl daemon-reload && systemctl restart " + strings.TrimSuffix(r.Unit, ".service")
	}
	if o.ExpectProxy && getEnvAny(env, "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy") == "" {
		r.Problems = append(r.Problems, fmt.Sprintf("pid %d has no HTTP_PROXY or HTTPS_PROXY: add them to its drop-in (egret node render) and %s", pid, restart))
	}
	for _, reg := range o.Registries {
		d := decide(reg, env)
		if !d.OK {
			host, _ := registryHost(reg)
			d.Advice = fmt.Sprintf("add %s to NO_PROXY and no_proxy in the drop-in, then %s", host, restart)
			if d.Decision == "error" {
				d.Advice = "check the registry name and the proxy variables in the drop-in, then " + restart
			}
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s — %s", reg, d.Reason, d.Advice))
		}
		r.Decisions = append(r.Decisions, d)
	}
	if o.Runtime == Kubelet || (o.Runtime == "" && r.Process == Kubelet.Process()) {
		checkKubeletAPIServer(r, o.Proc, env, restart)
	}
	if r.Unit != "" {
		ue, err := LoadUnitEnv(r.Unit, o.UnitDirs)
		if err != nil {
			return nil, err
		}
		r.UnitFiles = append(r.UnitFiles, ue.Files...)
		for _, m := range ue.Missing {
			r.Problems = append(r.Problems, fmt.Sprintf("%s names EnvironmentFile %s, which does not exist: %s does not start", r.Unit, m, r.Unit))
		}
		if len(ue.Files) > 0 {
			for _, n := range ProxyVars {
				lv, lok := live[n]
				cv, cok := ue.Env[n]
				if lok == cok && lv == cv {
					continue
				}
				r.Drift = append(r.Drift, Drift{Name: n, Live: redactValue(n, lv), LiveSet: lok, Configured: redactValue(n, cv), ConfiguredSet: cok})
			}
			if len(r.Drift) > 0 {
				var names []string
				for _, d := range r.Drift {
					names = append(names, d.Name)
				}
				r.Problems = append(r.Problems, fmt.Sprintf("the process runs with other %s than %s configures (%s): a drop-in changed after it started (or it was started another way); %s",
					plural(len(names), "value"), r.Unit, strings.Join(names, ", "), restart))
			}
			// The start time is known to about a second (the boot time is whole
			// seconds): only a clearly later change counts.
			if !r.Started.IsZero() && ue.Newest.Unix > r.Started.Unix()+1 {
				r.ChangedAfterStart = ue.Newest.Path
			}
		}
	}
	return r, nil
}

// goModel is noproxy's model of Go's net/http proxy rules (x/net httpproxy),
// which containerd, dockerd, CRI-O and the kubelet run.
var goModel = func() noproxy.Client {
	c, ok := noproxy.ClientByName("go")
	if !ok {
		panic("node: noproxy has no go client model")
	}
	return c
}()

// decide predicts what a Go daemon in env does with the registry's https URL.
func decide(reg string, env map[string]string) Decision {
	host := strings.TrimSpace(reg)
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
	}
	d := decideURL((&url.URL{Scheme: "https", Host: host, Path: "/v2/"}).String(), env)
	d.Registry = reg
	return d
}

// decideURL predicts what a Go daemon in env does with rawURL.
func decideURL(rawURL string, env map[string]string) Decision {
	d := Decision{URL: rawURL}
	res, err := goModel.Decide(d.URL, noproxy.Env(env))
	switch {
	case err != nil:
		d.Decision, d.Reason = "error", "not a host: "+err.Error()
	case res.Decision == noproxy.DecisionDirect:
		d.Decision, d.OK, d.Reason = "direct", true, res.Reason
	case res.Decision == noproxy.DecisionProxy:
		d.Decision, d.Proxy = "proxy", res.Proxy
		d.Reason = "would go through " + res.Proxy + ": " + res.Reason
	default:
		d.Decision, d.Reason = "error", res.Reason
	}
	return d
}

// getEnvAny returns the first of names that is set to a non-empty value, as
// Go's httpproxy.FromEnvironment does.
func getEnvAny(env map[string]string, names ...string) string {
	for _, n := range names {
		if v := env[n]; v != "" {
			return v
		}
	}
	return ""
}

// redactValue hides passwords in proxy URL variables.
func redactValue(name, v string) string {
	if v == "" || strings.EqualFold(name, "NO_PROXY") {
		return v
	}
	return Redact(v)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

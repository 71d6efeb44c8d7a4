package proxyd

import (
	"path/filepath"
	"reflect"
	"time"

	"egret.io/egret/internal/admin"
	"egret.io/egret/internal/config"
	"egret.io/egret/internal/upstream"
	"egret.io/egret/internal/watch"
)

// Live reload. SIGHUP, and a change of the configuration file (a mounted
// ConfigMap swaps its ..data link, as credentials do), re-read the whole
// configuration and validate it fully; a valid one has its routes, rules
// and pools swapped in at once (proxy.Server.SetState: requests and
// tunnels under way keep the state they started with; members keep their
// health through the health table). Listeners, the role, timeouts, limits,
// the SSRF guard and the client allow-list are the process's: a reload that
// changes them says so, and they take effect at the next restart. A bad
// file keeps the configuration in force, and says why in the log, in
// egret_config_reloads_total{what="config",result="error"} and on the
// status page.

// reloadStatus is what the status page says about reloads.
type reloadStatus struct {
	at      time.Time
	err     string
	restart []string
}

func (p *process) reloadStatus() *admin.ConfigStatus {
	if p.o.Reload == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return &admin.ConfigStatus{File: p.o.ConfigFile, EnvDir: p.cfg.EnvDir, LastReload: p.reloads.at, LastError: p.reloads.err, NeedsRestart: p.reloads.restart}
}

// watchReloads reloads on SIGHUP and on a change of the configuration
// file, until the process ends.
func (p *process) watchReloads() {
	if p.o.Reload == nil {
		return
	}
	changed, envChanged := make(chan struct{}, 1), make(chan struct{}, 1)
	if file := p.o.ConfigFile; file != "" {
		w := &watch.Files{
			Paths:    []string{file},
			Interval: p.current().Credentials.CheckInterval,
			Load: func([][]byte) error {
				select {
				case changed <- struct{}{}:
				default:
				}
				return nil
			},
			Failed: func(err error) { p.log.Warn("configuration file unreadable", "file", file, "error", err.Error()) },
		}
		w.Read() // the file was read at start: report changes from now on
		go w.Run(p.bg)
	}
	if dir := p.current().EnvDir; dir != "" {
		p.watchEnvDir(dir, envChanged)
	}
	go func() {
		for {
			select {
			case <-p.bg.Done():
				return
			case <-p.o.Hangup:
				p.reload("SIGHUP")
			case <-changed:
				p.reload("file changed")
			case <-envChanged:
				p.reload("settings directory changed")
			}
		}
	}()
}

// watchEnvDir signals changed when a file of the settings directory
// appears, changes or goes (a mounted Secret created after the pod started,
// or updated: the kubelet swaps its ..data link). Only the names the
// configuration reads are watched.
func (p *process) watchEnvDir(dir string, changed chan<- struct{}) {
	names := config.EnvDirNames()
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = filepath.Join(dir, n)
	}
	w := &watch.Files{
		Paths:    paths,
		Optional: paths,
		Interval: p.current().Credentials.CheckInterval,
		Load: func([][]byte) error {
			select {
			case changed <- struct{}{}:
			default:
			}
			return nil
		},
		Failed: func(err error) { p.log.Warn("settings directory unreadable", "dir", dir, "error", err.Error()) },
	}
	w.Read() // the directory was read at start: report changes from now on
	go w.Run(p.bg)
}

// reload re-reads the configuration and swaps its routes, rules and pools
// in, or keeps the configuration in force when the new one is not valid.
func (p *process) reload(why string) {
	cfg, err := p.o.Reload()
	var st = p.s.State()
	if err == nil {
		st, err = BuildState(cfg, p.health, p.creds.storeOrNil())
	}
	if err == nil {
		err = p.s.SetState(st)
	}
	now := time.Now()
	if err != nil {
		p.mu.Lock()
		p.reloads.at, p.reloads.err = now, err.Error()
		p.mu.Unlock()
		p.m.ConfigReloads.WithLabelValues("config", "error").Inc()
		p.log.Error("configuration not reloaded; the one in force stays", "trigger", why, "error", err.Error())
		return
	}
	p.follow(cfg, st)
	restart := needsRestart(p.boot, cfg)
	p.mu.Lock()
	p.cfg = cfg
	p.reloads = reloadStatus{at: now, restart: restart}
	p.mu.Unlock()
	if p.policy != nil {
		p.policy.Recheck() // the pools and their grants may have changed
	}
	pools := make([]*upstream.Pool, 0, len(st.Pools))
	for _, pl := range st.Pools {
		pools = append(pools, pl)
	}
	p.health.Retain(pools)
	for _, n := range cfg.Notes {
		p.log.Warn("config", "note", n)
	}
	p.m.ConfigReloads.WithLabelValues("config", "ok").Inc()
	p.log.Info("configuration reloaded", "trigger", why, "default_route", routeString(cfg.Default, cfg.DefaultPool),
		"rules", len(cfg.Rules), "pools", poolSummary(cfg))
	if len(restart) > 0 {
		p.log.Warn("configuration reloaded; these settings changed and take effect at the next restart", "settings", restart)
	}
}

// needsRestart names the settings that differ between old (the
// configuration the process started with) and cfg and that a reload does
// not apply.
func needsRestart(old, cfg *config.Proxy) []string {
	var out []string
	for _, c := range []struct {
		name     string
		was, now any
	}{
		{"role", old.Role, cfg.Role},
		{"listen", old.Listen, cfg.Listen},
		{"admin_listen", old.AdminListen, cfg.AdminListen},
		{"transparent_listen", old.TransparentListen, cfg.TransparentListen},
		{"socks_listen", old.SOCKSListen, cfg.SOCKSListen},
		{"socks authentication", old.SOCKSAuth, cfg.SOCKSAuth},
		{"via", old.Via, cfg.Via},
		{"credentials", old.Credentials, cfg.Credentials},
		{"gateway (client allow-list, SSRF guard)", old.Gateway, cfg.Gateway},
		{"limits", old.Limits, cfg.Limits},
		{"resolver", old.Resolver, cfg.Resolver},
		{"timeouts", old.Timeouts, cfg.Timeouts},
		{"drain", [2]time.Duration{old.DrainPeriod, old.DrainTimeout}, [2]time.Duration{cfg.DrainPeriod, cfg.DrainTimeout}},
		{"log", [3]any{old.LogLevel, old.LogFormat, old.AccessLog}, [3]any{cfg.LogLevel, cfg.LogFormat, cfg.AccessLog}},
		{"admin (pprof, token file)", [2]any{old.PProf, old.AdminTokenFile}, [2]any{cfg.PProf, cfg.AdminTokenFile}},
		{"policy (EGRET_POLICY, token audience, rate-limit service)", old.Policy, cfg.Policy},
		{"intercept", old.Intercept, cfg.Intercept},
	} {
		if !reflect.DeepEqual(c.was, c.now) {
			out = append(out, c.name)
		}
	}
	return out
}

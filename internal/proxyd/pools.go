package proxyd

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"egret.io/egret/internal/admin"
	"egret.io/egret/internal/config"
	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/proxy"
	"egret.io/egret/internal/upstream"
	"egret.io/egret/internal/watch"
)

// credentialState follows the credentials directory for the status page.
type credentialState struct {
	dir   string
	store *credentials.Store

	mu         sync.Mutex
	lastReload time.Time
	lastErr    string
}

// reloaded records the outcome of a re-read for the status page and
// returns the metric's result label, "ok" or "error".
func (c *credentialState) reloaded(err error) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.lastErr = err.Error()
		return "error"
	}
	c.lastReload, c.lastErr = time.Now(), ""
	return "ok"
}

func (c *credentialState) storeOrNil() *credentials.Store {
	if c == nil {
		return nil
	}
	return c.store
}

func (c *credentialState) status() *admin.CredentialStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &admin.CredentialStatus{Dir: c.dir, LastReload: c.lastReload, LastError: c.lastErr, Rotating: c.store.Rotating()}
}

// startCredentials loads the credentials directory (the store pools give
// members without credentials of their own) and re-reads it on change
// until ctx ends. It returns nil when no directory is configured. The
// directory is the process's: a reload that names another needs a restart.
func startCredentials(ctx context.Context, cfg *config.Proxy, p *process, log *slog.Logger) (*credentialState, error) {
	dir := cfg.Credentials.Dir
	if dir == "" {
		return nil, nil
	}
	cs := &credentialState{dir: dir, store: credentials.NewStore(nil)}
	d := &credentials.Dir{Path: dir, Interval: cfg.Credentials.CheckInterval, Store: cs.store}
	if err := d.Load(); err != nil {
		if cfg.Credentials.Required {
			return nil, err
		}
		log.Warn("credentials directory unreadable; members without credentials will not authenticate until it is", "dir", dir, "error", err.Error())
		cs.lastErr = err.Error()
	} else {
		cs.lastReload = time.Now()
	}
	d.Reloaded = func(err error) {
		p.m.ConfigReloads.WithLabelValues("credentials", cs.reloaded(err)).Inc()
		if err != nil {
			log.Error("upstream credentials not reloaded; the previous ones stay in use", "dir", dir, "error", err.Error())
			return
		}
		// Members that failed with the old credential get a fresh chance.
		for _, pl := range p.s.State().Pools {
			if pl.Credentials == cs.store {
				pl.ResetHealth()
			}
		}
		log.Info("upstream credentials reloaded; the previous ones are kept until the new ones work", "dir", dir)
	}
	go d.Run(ctx)
	return cs, nil
}

// follow starts the member-file watches and the probes of st's pools,
// and ends those of the state before.
func (p *process) follow(cfg *config.Proxy, st *proxy.State) {
	ctx, stop := context.WithCancel(p.bg)
	for name, pc := range cfg.Pools {
		pl := st.Pools[name]
		if pl == nil {
			continue
		}
		if pc.MembersFile != "" {
			p.watchMembers(ctx, cfg, pl, pc)
		}
		if pc.Probe.Target != "" {
			go pl.RunProbes(ctx, pc.Probe, p.s.Transport().Opener(pl))
		}
	}
	p.mu.Lock()
	prev := p.stopGen
	p.stopGen = stop
	p.mu.Unlock()
	if prev != nil {
		prev()
	}
}

func (p *process) watchMembers(ctx context.Context, cfg *config.Proxy, pl *upstream.Pool, o config.Pool) {
	w := &watch.Files{
		Paths:    []string{o.MembersFile},
		Interval: cfg.Credentials.CheckInterval,
		Load: func(c [][]byte) error {
			ms, err := upstream.ParseMemberList(string(c[0]))
			if err != nil {
				return fmt.Errorf("members file %s: %w", o.MembersFile, err)
			}
			removed := pl.SetMembers(newMembers(append(append([]upstream.MemberSpec(nil), o.Static...), ms...)))
			p.s.RetireConnections()
			p.m.ConfigReloads.WithLabelValues("members", "ok").Inc()
			p.log.Info("upstream members reloaded", "pool", pl.Name, "file", o.MembersFile, "members", len(pl.Current()), "removed", len(removed))
			return nil
		},
		Failed: func(err error) {
			p.m.ConfigReloads.WithLabelValues("members", "error").Inc()
			p.log.Error("upstream members not reloaded; the previous ones stay in use", "pool", pl.Name, "error", err.Error())
		},
	}
	// The file was read when the configuration was loaded: report changes
	// from that content on.
	if _, err := w.Read(); err != nil {
		p.log.Warn("members file unreadable", "pool", pl.Name, "error", err.Error())
	}
	go w.Run(ctx)
}

package upstream

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"egret.io/egret/internal/credentials"
)

// Defaults for Probe fields left zero.
const (
	DefaultProbeInterval = 10 * time.Second
	DefaultProbeTimeout  = 5 * time.Second
)

// Probe is an active health check: a CONNECT to Target through every
// member on an interval. A success marks the member up (ending its
// back-off early); a failure that is the member's fault marks it down.
type Probe struct {
	Target   string // host:port reached through each member
	Interval time.Duration
	Timeout  time.Duration
}

// Opener makes one attempt at a tunnel to target through m with cred (nil:
// none), as internal/transport's OpenTunnel does: the tunnel (closed by
// the probe), the member's status code (0 when it did not answer) and the
// failure. The pool does not dial: the transport does.
type Opener func(ctx context.Context, m *Member, target string, cred *credentials.Credential) (io.Closer, int, error)

// RunProbes probes every member of the pool on pr's interval, through
// open, until ctx ends. Members are probed concurrently so a dead one does not delay the
// others.
func (p *Pool) RunProbes(ctx context.Context, pr Probe, open Opener) {
	if pr.Target == "" {
		return
	}
	every := pr.Interval
	if every <= 0 {
		every = DefaultProbeInterval
	}
	// Start at a random point of the first interval so replicas started
	// together do not probe together.
	first := time.NewTimer(time.Duration(rand.Int64N(int64(every)/4 + 1)))
	defer first.Stop()
	select {
	case <-ctx.Done():
		return
	case <-first.C:
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		p.ProbeOnce(ctx, pr, open)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ProbeOnce probes every member once, through open, and waits for the
// results.
func (p *Pool) ProbeOnce(ctx context.Context, pr Probe, open Opener) {
	timeout := pr.Timeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	var wg sync.WaitGroup
	for _, m := range p.Current() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			cred, err := p.tryMember(pctx, m, false, nil, func(ctx context.Context, m *Member, cred *credentials.Credential, _ bool) (int, error) {
				t, code, err := open(ctx, m, pr.Target, cred)
				if t != nil {
					t.Close()
				}
				return code, err
			})
			m.h.mu.Lock()
			m.h.probedAt, m.h.probeOK = p.now(), err == nil
			m.h.mu.Unlock()
			if ev := p.Events; ev != nil && ev.Probed != nil {
				ev.Probed(p.Name, m, err)
			}
			if ctx.Err() != nil {
				return
			}
			var sil *Silence
			switch {
			case err == nil:
				p.succeeded(m, cred, "probe")
			case errors.As(err, &sil):
				// The probe target is the operator's choice of a
				// destination that answers: the silence is the member's.
				d := m.MarkDown(p.now(), p.Backoff, sil.Err.Error())
				if ev := p.Events; ev != nil && ev.Down != nil {
					ev.Down(p.Name, m, d, err)
				}
			default:
				p.Failed(m, err)
			}
		}()
	}
	wg.Wait()
}

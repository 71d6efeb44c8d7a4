package proxy

import (
	"time"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/upstream"
)

// poolEvents turns what happens to pool members into metrics and log
// lines. Log lines name members by their redacted URL only.
func (s *Server) poolEvents() *upstream.Events {
	return &upstream.Events{
		Attempt: func(pool string, m *upstream.Member, code int, err error) {
			if s.m == nil {
				return
			}
			s.m.UpstreamAttempts.WithLabelValues(pool, m.Name).Inc()
			if code != 0 {
				s.m.UpstreamResponses.WithLabelValues(pool, m.Name, metrics.Code(code)).Inc()
			}
			if err != nil {
				s.m.UpstreamErrors.WithLabelValues(pool, m.Name, string(proxystatus.From(err).Type)).Inc()
			}
		},
		Down: func(pool string, m *upstream.Member, backoff time.Duration, err error) {
			if s.m != nil {
				s.m.UpstreamMemberDown.WithLabelValues(pool, m.Name).Inc()
			}
			pe := proxystatus.From(err)
			s.log.Warn("upstream member down", "pool", pool, "member", m.Name, "error", string(pe.Type),
				"detail", pe.Detail, "backoff", backoff.String())
		},
		Up: func(pool string, m *upstream.Member, how string) {
			s.log.Info("upstream member up", "pool", pool, "member", m.Name, "after", how)
		},
		Probed: func(pool string, m *upstream.Member, err error) {
			if s.m != nil {
				res := "ok"
				if err != nil {
					res = "error"
				}
				s.m.UpstreamProbes.WithLabelValues(pool, res).Inc()
			}
		},
		Fallback: func(pool string, m *upstream.Member) {
			if s.m != nil {
				s.m.CredentialFallbacks.WithLabelValues(pool).Inc()
			}
			s.log.Warn("upstream refused the new credential (407); used the previous one", "pool", pool, "member", m.Name)
		},
	}
}

package transport

import (
	"errors"
	"net/http"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/upstream"
)

// ErrClientLeft is the cause of an attempt given up because the client
// closed its connection while egret waited on its behalf. It is the one
// such sentinel (http1's).
var ErrClientLeft = http1.ErrClientLeft

// ClientGone is a failure on the client's side of a request or tunnel: it
// left while egret waited (ErrClientLeft), or writing to it failed. There
// is nobody to answer: it is logged, never blamed on a destination or a
// member, never retried. Any two ClientGone errors match with errors.Is.
type ClientGone struct{ Err error }

func (e *ClientGone) Error() string { return "client went away: " + e.Err.Error() }
func (e *ClientGone) Unwrap() error { return e.Err }

// Is makes every ClientGone match any other: errors.Is(err, &ClientGone{}).
func (e *ClientGone) Is(target error) bool {
	_, ok := target.(*ClientGone)
	return ok
}

// IsClientGone reports whether err is, or wraps, a ClientGone.
func IsClientGone(err error) bool {
	var cg *ClientGone
	return errors.As(err, &cg)
}

// NotSent is an attempt that failed before the request could have reached
// the origin: the member could not be reached, or refused the request
// itself (407, 403, or a 5xx that names the destination's fault). Any
// method may be tried again, through another member, while its body can
// still be sent.
type NotSent struct{ Err error }

func (e *NotSent) Error() string { return e.Err.Error() }
func (e *NotSent) Unwrap() error { return e.Err }

// IsNotSent reports whether err is, or wraps, a NotSent.
func IsNotSent(err error) bool {
	var ns *NotSent
	return errors.As(err, &ns)
}

// Upstream is a member's own answer refusing a request or a tunnel: its
// status (407, 403, 5xx) and what it said. Read it with UpstreamStatus.
type Upstream = upstream.Refusal

// UpstreamStatus is the status of the member's own refusal in err, and
// whether there is one.
func UpstreamStatus(err error) (int, bool) {
	var r *Upstream
	if errors.As(err, &r) {
		return r.Code, true
	}
	return 0, false
}

// Attempt types the failure of one attempt through a member, once, where
// it happened: NotSent when the request certainly did not reach the
// origin — reaching the member failed (the failure names the member; a
// member that took the request and went silent, *upstream.Silence, may
// have sent it on), or the member refused it with 407, 403 or a
// destination fault — else err as it is. Failover reads it with
// IsNotSent; Proxy-Status reads through it (proxystatus.From).
func Attempt(err error) error {
	if err == nil || IsNotSent(err) || IsClientGone(err) {
		return err
	}
	var sil *upstream.Silence
	if errors.As(err, &sil) {
		return err
	}
	var r *upstream.Refusal
	if errors.As(err, &r) {
		if r.Code == http.StatusProxyAuthRequired || r.Code == http.StatusForbidden || r.DestinationFault {
			return &NotSent{Err: err}
		}
		return err
	}
	if proxystatus.From(err).Upstream != "" {
		return &NotSent{Err: err}
	}
	return err
}

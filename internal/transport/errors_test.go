package transport

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/upstream"
)

func TestClientGoneMatches(t *testing.T) {
	a := &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: "client went away", Err: &ClientGone{Err: ErrClientLeft}}
	b := fmt.Errorf("respond: %w", &ClientGone{Err: errors.New("write: broken pipe")})
	for _, err := range []error{a, b} {
		if !IsClientGone(err) || !errors.Is(err, &ClientGone{}) {
			t.Errorf("%v: not a ClientGone", err)
		}
	}
	if !errors.Is(a, ErrClientLeft) {
		t.Error("a ClientGone for ErrClientLeft does not match it")
	}
	// Proxy-Status reads through it.
	if pe := proxystatus.From(a); pe.Type != proxystatus.ConnectionTerminated {
		t.Errorf("Proxy-Status type %s", pe.Type)
	}
	other := &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: "client went away"}
	if IsClientGone(other) {
		t.Error("an error with the same words but no ClientGone counts as one")
	}
}

func TestAttempt(t *testing.T) {
	member := "http://m.test:3128"
	reach := &proxystatus.Error{Type: proxystatus.ConnectionRefused, Upstream: member, Detail: "connect to upstream: refused"}
	silent := &upstream.Silence{Err: &proxystatus.Error{Type: proxystatus.ConnectionReadTimeout, Upstream: member}}
	refusal := func(code int, destFault bool) error {
		return &upstream.Refusal{Code: code, DestinationFault: destFault, Err: &proxystatus.Error{Type: proxystatus.UpstreamRefused, Upstream: member}}
	}
	origin := &proxystatus.Error{Type: proxystatus.HTTPResponseIncomplete, Detail: "via upstream: the origin closed"}
	for _, tc := range []struct {
		name    string
		err     error
		notSent bool
		status  int
	}{
		{"member unreachable", reach, true, 0},
		{"member silent", silent, false, 0},
		{"member 407", refusal(http.StatusProxyAuthRequired, false), true, 407},
		{"member 403", refusal(http.StatusForbidden, false), true, 403},
		{"member 502 for the destination", refusal(http.StatusBadGateway, true), true, 502},
		{"member 502", refusal(http.StatusBadGateway, false), false, 502},
		{"origin failed through the member", origin, false, 0},
		{"client gone", &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Err: &ClientGone{Err: ErrClientLeft}}, false, 0},
	} {
		err := Attempt(tc.err)
		if got := IsNotSent(err); got != tc.notSent {
			t.Errorf("%s: NotSent %v, want %v", tc.name, got, tc.notSent)
		}
		if code, ok := UpstreamStatus(err); code != tc.status || ok != (tc.status != 0) {
			t.Errorf("%s: upstream status %d %v, want %d", tc.name, code, ok, tc.status)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: the typed error does not wrap the original", tc.name)
		}
		if Attempt(err) != err {
			t.Errorf("%s: typed twice", tc.name)
		}
	}
}

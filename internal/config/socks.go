package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// SOCKSAuth is the username and password SOCKS5 clients must present
// (RFC 1929). The password is a secret: never log or print it.
type SOCKSAuth struct {
	User     string
	Password string
}

// socksAuth reads the SOCKS5 listener's credentials from the environment
// only: SOCKS_USER with SOCKS_PASS or SOCKS_PASS_FILE (a mounted Secret).
// It returns nil when none are set.
func (l *loader) socksAuth(listen string) (*SOCKSAuth, error) {
	user := l.env("SOCKS_USER")
	pass, hasPass := l.env("SOCKS_PASS"), l.env("SOCKS_PASS") != ""
	if file := strings.TrimSpace(l.env("SOCKS_PASS_FILE")); file != "" {
		if hasPass {
			return nil, errors.New("SOCKS_PASS and SOCKS_PASS_FILE are both set: use one")
		}
		data, err := l.src.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("SOCKS_PASS_FILE: %w", err)
		}
		pass, hasPass = strings.TrimRight(string(data), "\r\n"), true
		if pass == "" {
			return nil, fmt.Errorf("SOCKS_PASS_FILE %s is empty", file)
		}
	}
	switch {
	case user == "" && !hasPass:
		if listen != "" && !LoopbackListen(listen) {
			l.note("the SOCKS5 listener %s accepts every client without authentication: set SOCKS_USER and SOCKS_PASS, or listen on loopback", listen)
		}
		return nil, nil
	case user == "":
		return nil, errors.New("SOCKS_PASS is set without SOCKS_USER")
	case !hasPass:
		return nil, errors.New("SOCKS_USER is set without SOCKS_PASS or SOCKS_PASS_FILE")
	case len(user) > 255:
		return nil, fmt.Errorf("SOCKS_USER is %d bytes long; SOCKS5 allows at most 255", len(user))
	case len(pass) > 255:
		return nil, fmt.Errorf("the SOCKS5 password is %d bytes long; SOCKS5 allows at most 255", len(pass))
	}
	if listen == "" {
		l.note("SOCKS_USER is set but the SOCKS5 listener is off (set SOCKS_LISTEN_ADDR)")
	}
	return &SOCKSAuth{User: user, Password: pass}, nil
}

// LoopbackListen reports whether a listen address (host:port) only accepts
// local clients: a loopback IP or "localhost" (any case).
func LoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

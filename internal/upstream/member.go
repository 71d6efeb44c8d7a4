package upstream

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Member is one upstream proxy.
type Member struct {
	// URL is the proxy's address: scheme, host and port, never user info.
	URL *url.URL
	// Name is URL as a string, safe to log and to show to clients.
	Name string

	user     string
	password string
	hasAuth  bool
	auth     string   // precomputed "Basic ..." for http(s) members
	proxyURL *url.URL // URL with credentials, for http.Transport
}

// Schemes a member may use.
const (
	SchemeHTTP   = "http"
	SchemeHTTPS  = "https"
	SchemeSOCKS5 = "socks5"
)

// ParseMember reads an upstream proxy URL such as
// "http://user:p%40ss@proxy.corp:3128". A value without a scheme is taken as
// http://. The port defaults to 80 (http), 443 (https) or 1080 (socks5).
// Errors name the member without its credentials.
func ParseMember(raw string) (*Member, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, fmt.Errorf("empty upstream proxy URL")
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %s: invalid URL", Redact(raw))
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case SchemeHTTP, SchemeHTTPS, SchemeSOCKS5:
	case "socks5h":
		scheme = SchemeSOCKS5 // egret always lets the socks5 proxy resolve names
	default:
		return nil, fmt.Errorf("upstream proxy %s: unsupported scheme %q (want http, https or socks5)", Redact(raw), u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("upstream proxy %s: no host", Redact(raw))
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream proxy %s: a proxy URL has no path, query or fragment", Redact(raw))
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{SchemeHTTP: "80", SchemeHTTPS: "443", SchemeSOCKS5: "1080"}[scheme]
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return nil, fmt.Errorf("upstream proxy %s: bad port %q", Redact(raw), port)
	}
	m := &Member{URL: &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}}
	m.Name = m.URL.String()
	var user, pw string
	if u.User != nil {
		user = u.User.Username()
		pw, _ = u.User.Password()
	}
	m.SetCredentials(user, pw)
	return m, nil
}

// SetCredentials sets the member's user and password (already decoded).
// It is meant for building a member, before it is shared.
func (m *Member) SetCredentials(user, password string) {
	m.user, m.password, m.hasAuth = user, password, user != "" || password != ""
	m.auth = ""
	u := *m.URL
	if m.hasAuth {
		m.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
		u.User = url.UserPassword(user, password)
	}
	m.proxyURL = &u
}

// HasCredentials reports whether the member authenticates.
func (m *Member) HasCredentials() bool { return m.hasAuth }

// ProxyURL returns the member's URL with its credentials, for
// http.Transport. The caller must not modify it. Never log it.
func (m *Member) ProxyURL() *url.URL { return m.proxyURL }

// AuthHeader returns the Proxy-Authorization value for http(s) members, or
// "" when the member has no credentials.
func (m *Member) AuthHeader() string { return m.auth }

func (m *Member) String() string { return m.Name }

// Redact removes the password from anything that looks like a URL with
// user info, so it can appear in an error. It keeps the user name.
func Redact(raw string) string {
	i := strings.Index(raw, "://")
	rest := raw
	prefix := ""
	if i >= 0 {
		prefix, rest = raw[:i+3], raw[i+3:]
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return raw
	}
	userinfo := rest[:at]
	if c := strings.IndexByte(userinfo, ':'); c >= 0 {
		userinfo = userinfo[:c] + ":xxxxx"
	}
	return prefix + userinfo + rest[at:]
}

package proxyauth

import (
	"fmt"
	"net/http"
	"strings"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/proxystatus"
)

// Scheme is how egret authenticates to an upstream proxy.
type Scheme uint8

// Schemes.
const (
	// Basic sends the user and password with every request (the default).
	Basic Scheme = iota
	// NTLM authenticates a connection with a three-message handshake.
	NTLM
	// Negotiate authenticates a connection with a Kerberos ticket (SPNEGO).
	Negotiate
)

func (s Scheme) String() string {
	switch s {
	case Basic:
		return "basic"
	case NTLM:
		return "ntlm"
	case Negotiate:
		return "negotiate"
	}
	return fmt.Sprintf("unknown(%d)", uint8(s))
}

// ParseScheme reads "basic", "ntlm" or "negotiate" (any case; "kerberos"
// is taken as negotiate); "" is Basic.
func ParseScheme(v string) (Scheme, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "basic":
		return Basic, nil
	case "ntlm":
		return NTLM, nil
	case "negotiate", "kerberos":
		return Negotiate, nil
	}
	return Basic, fmt.Errorf("auth %q: want basic, ntlm or negotiate", v)
}

// PerConnection reports whether an authentication with s holds for the
// connection it ran on rather than for one request: such a connection
// carries only the tunnel or the requests of the client it was made for.
func (s Scheme) PerConnection() bool { return s == NTLM || s == Negotiate }

// headerName is the scheme's token in Proxy-Authenticate and
// Proxy-Authorization.
func (s Scheme) headerName() string {
	switch s {
	case NTLM:
		return "NTLM"
	case Negotiate:
		return "Negotiate"
	}
	return "Basic"
}

// Handshake authenticates one connection (for Basic: one request) with a
// credential. It is used by one goroutine.
type Handshake struct {
	// Scheme is the scheme to run.
	Scheme Scheme
	// Cred is the credential; nil makes First fail.
	Cred *credentials.Credential
	// SPN is the Kerberos service principal of the proxy
	// ("HTTP/proxy.corp.example"), for Negotiate.
	SPN string
	// Kerberos gets the tickets, for Negotiate.
	Kerberos *Kerberos

	round int
}

// First returns the Proxy-Authorization value of the first request.
func (h *Handshake) First() (string, error) {
	h.round = 1
	if h.Cred == nil {
		return "", &Error{Kind: Config, Detail: h.Scheme.String() + " authentication needs a user name (and a password or keytab)"}
	}
	switch h.Scheme {
	case NTLM:
		return ntlmNegotiate()
	case Negotiate:
		if h.Kerberos == nil {
			return "", &Error{Kind: Config, Detail: "negotiate: no Kerberos client"}
		}
		return h.Kerberos.Token(h.Cred, h.SPN)
	}
	return h.Cred.AuthHeader(), nil
}

// Next answers the proxy's 407 to the previous value, given its
// Proxy-Authenticate values, with the value of the next request. It fails
// with an *Error when there is no next round: the proxy refused the
// credential, does not offer the scheme, or sent a challenge that cannot
// be answered.
func (h *Handshake) Next(challenges []string) (string, error) {
	h.round++
	tok, offered := findChallenge(challenges, h.Scheme.headerName())
	switch {
	case !offered:
		return "", &Error{Kind: NotOffered, Detail: fmt.Sprintf("it does not offer %s authentication (it offers %s); set auth= to one it offers", h.Scheme.headerName(), offers(challenges))}
	case h.Scheme == NTLM && h.round == 2:
		if tok == "" {
			return "", &Error{Kind: BadChallenge, Detail: "NTLM challenge refused: it answered the NTLM negotiate message with no challenge"}
		}
		return ntlmAuthenticate(tok, h.Cred)
	case h.Scheme == Negotiate && tok != "" && !negotiateRefusal(tok):
		return "", &Error{Kind: BadChallenge, Detail: "it asked for another Negotiate round: egret speaks Kerberos in one round, not NTLM inside Negotiate (use auth=ntlm)"}
	}
	return "", &Error{Kind: Refused, Detail: h.refusal()}
}

func (h *Handshake) refusal() string {
	switch h.Scheme {
	case NTLM:
		return fmt.Sprintf("it refused the NTLM authentication of %s: wrong password, or a user unknown to its domain", h.Cred)
	case Negotiate:
		return fmt.Sprintf("it refused the Kerberos ticket of %s for %s: its keytab lacks that service principal's key, or it expects another spn", h.Cred, h.SPN)
	}
	return "it rejected egret's credentials (407)"
}

// findChallenge looks for scheme among Proxy-Authenticate values and
// returns its token ("" for the bare scheme) and whether it was offered.
func findChallenge(values []string, scheme string) (token string, offered bool) {
	for _, v := range values {
		for _, c := range strings.Split(v, ",") {
			c = strings.TrimSpace(c)
			name, rest, _ := strings.Cut(c, " ")
			if strings.EqualFold(name, scheme) {
				return strings.TrimSpace(rest), true
			}
		}
	}
	return "", false
}

// offers lists the schemes among Proxy-Authenticate values, for an error.
func offers(values []string) string {
	var names []string
	for _, v := range values {
		for _, c := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(c), " ")
			// Parameters of a Basic challenge (realm="x") follow commas.
			if name == "" || strings.Contains(name, "=") || !printableToken(name) {
				continue
			}
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "nothing"
	}
	return strings.Join(names, ", ")
}

func printableToken(s string) bool {
	if len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// Kind is what failed in an authentication. The set is closed.
type Kind uint8

// Kinds of failure.
const (
	// Refused: the proxy answered the complete handshake with 407 (wrong
	// password, unknown user, a ticket it cannot read).
	Refused Kind = iota + 1
	// NotOffered: the proxy does not offer the scheme.
	NotOffered
	// BadChallenge: the proxy's challenge cannot be answered (NTLM
	// challenge refused).
	BadChallenge
	// KDCRefused: the KDC refused the credential (wrong password or
	// keytab, unknown, locked or expired principal).
	KDCRefused
	// NoTicket: no service ticket for the proxy's SPN (the KDC knows no
	// such principal).
	NoTicket
	// ClockSkew: this host's clock and the KDC's (or the proxy's) differ
	// by more than the allowed skew.
	ClockSkew
	// WrongRealm: no KDC is known for the realm, or the KDC is not of it.
	WrongRealm
	// KDCUnreachable: no KDC of the realm answered.
	KDCUnreachable
	// Config: the credential or krb5.conf is unusable (no password or
	// keytab, a keytab without the principal's key, a bad file).
	Config
)

func (k Kind) String() string {
	switch k {
	case Refused:
		return "refused"
	case NotOffered:
		return "not_offered"
	case BadChallenge:
		return "bad_challenge"
	case KDCRefused:
		return "kdc_refused"
	case NoTicket:
		return "no_ticket"
	case ClockSkew:
		return "clock_skew"
	case WrongRealm:
		return "wrong_realm"
	case KDCUnreachable:
		return "kdc_unreachable"
	case Config:
		return "config"
	}
	return fmt.Sprintf("unknown(%d)", uint8(k))
}

// Error is a failed authentication. Detail is one line, safe for a log and
// a client: it names users, realms and principals, never a password, hash,
// token or ticket.
type Error struct {
	Kind   Kind
	Detail string
	// Timeout is set on KDCUnreachable when the KDC did not answer in time
	// (rather than refusing the connection).
	Timeout bool
	// Err is the cause, for the log (gokrb5's text: no secrets).
	Err error
}

func (e *Error) Error() string { return e.Detail }
func (e *Error) Unwrap() error { return e.Err }

// Type is the Proxy-Status error type of e: upstream_auth_required when the
// proxy or the KDC refused egret's credential or the proxy cannot be
// authenticated to with the scheme; proxy_configuration_error for egret's
// own setup (SPN, realm, clock, files); connection_refused or
// connection_timeout for an unreachable KDC.
func (e *Error) Type() proxystatus.Type {
	switch e.Kind {
	case Refused, NotOffered, BadChallenge, KDCRefused:
		return proxystatus.UpstreamAuthRequired
	case KDCUnreachable:
		if e.Timeout {
			return proxystatus.ConnectionTimeout
		}
		return proxystatus.ConnectionRefused
	}
	return proxystatus.ProxyConfigurationErr
}

// Status is the HTTP status egret answers with for e.
func (e *Error) Status() int {
	if e.Kind == KDCUnreachable && e.Timeout {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// CredentialRefused reports whether e says the credential itself was
// refused (by the proxy or the KDC): a previous credential kept during a
// rotation is worth trying.
func (e *Error) CredentialRefused() bool { return e.Kind == Refused || e.Kind == KDCRefused }

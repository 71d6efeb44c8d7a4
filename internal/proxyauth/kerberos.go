package proxyauth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/spnego"

	"egret.io/egret/internal/credentials"
)

// Kerberos holds one gokrb5 client per credential: logged in (an AS
// exchange with the KDC) on first use, its TGT renewed by gokrb5 and its
// service tickets cached per SPN, so a new connection costs a KDC round
// trip only for the first ticket of each SPN. It is safe for concurrent
// use; the zero value is ready. Keep drops the clients of credentials no
// longer in use.
type Kerberos struct {
	mu      sync.Mutex
	clients map[*credentials.Credential]*krbClient
}

type krbClient struct {
	// mu is held to log in and to destroy (write), and while the client
	// makes a token (read).
	mu   sync.RWMutex
	cl   *client.Client
	gone bool // destroyed by Keep: no new login
}

// Token returns the Proxy-Authorization value ("Negotiate <SPNEGO token
// with a Kerberos AP-REQ>") for spn, as cred's principal. cred.User is
// "user@REALM", or "user" of krb5.conf's default realm; the keys come from
// cred.Keytab, else cred.Password.
func (k *Kerberos) Token(cred *credentials.Credential, spn string) (string, error) {
	e := k.entry(cred)
	e.mu.RLock()
	if e.cl == nil && !e.gone {
		e.mu.RUnlock()
		e.mu.Lock()
		if e.cl == nil && !e.gone {
			cl, err := login(cred)
			if err != nil {
				e.mu.Unlock()
				return "", err
			}
			e.cl = cl
		}
		e.mu.Unlock()
		e.mu.RLock()
	}
	// Held while the client is used: Keep destroys it only once no
	// handshake uses it.
	defer e.mu.RUnlock()
	if e.cl == nil {
		return "", &Error{Kind: Config, Detail: fmt.Sprintf("Kerberos: the credential of %s was replaced during the handshake", cred)}
	}
	tok, err := spnego.SPNEGOClient(e.cl, spn).InitSecContext()
	if err != nil {
		return "", classifyKerberos(err, cred, spn)
	}
	b, err := tok.Marshal()
	if err != nil {
		return "", &Error{Kind: Config, Detail: "Kerberos: cannot encode the SPNEGO token", Err: err}
	}
	return "Negotiate " + base64.StdEncoding.EncodeToString(b), nil
}

func (k *Kerberos) entry(cred *credentials.Credential) *krbClient {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.clients == nil {
		k.clients = map[*credentials.Credential]*krbClient{}
	}
	e := k.clients[cred]
	if e == nil {
		e = &krbClient{}
		k.clients[cred] = e
	}
	return e
}

// Keep destroys the clients of credentials other than keep (stopping
// their renewal) and forgets them.
func (k *Kerberos) Keep(keep ...*credentials.Credential) {
	k.mu.Lock()
	var drop []*krbClient
	for c, e := range k.clients {
		if !containsCred(keep, c) {
			drop = append(drop, e)
			delete(k.clients, c)
		}
	}
	k.mu.Unlock()
	for _, e := range drop {
		e.mu.Lock()
		if e.cl != nil {
			e.cl.Destroy()
			e.cl = nil
		}
		e.gone = true
		e.mu.Unlock()
	}
}

// Close destroys every client.
func (k *Kerberos) Close() { k.Keep() }

// Clients returns the number of credentials with a client.
func (k *Kerberos) Clients() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.clients)
}

func containsCred(l []*credentials.Credential, c *credentials.Credential) bool {
	for _, x := range l {
		if x == c {
			return true
		}
	}
	return false
}

// login builds cred's client and gets its TGT.
func login(cred *credentials.Credential) (*client.Client, error) {
	user, realm, _ := strings.Cut(cred.User, "@")
	cfg, err := krb5Config(cred.Krb5Conf, realm)
	if err != nil {
		return nil, err
	}
	if realm == "" {
		realm = cfg.LibDefaults.DefaultRealm
	}
	if realm == "" {
		return nil, &Error{Kind: WrongRealm, Detail: fmt.Sprintf("Kerberos: %s names no realm (write user@REALM) and krb5.conf has no default_realm", cred)}
	}
	if _, _, err := cfg.GetKDCs(realm, true); err != nil {
		return nil, &Error{Kind: WrongRealm, Detail: fmt.Sprintf("Kerberos: wrong realm %s: no KDC is known for it (krb5.conf [realms], or DNS SRV records)", realm), Err: err}
	}
	var cl *client.Client
	switch {
	case cred.Keytab != nil:
		kt := keytab.New()
		if err := kt.Unmarshal(cred.Keytab); err != nil {
			return nil, &Error{Kind: Config, Detail: "Kerberos: the keytab file is not a keytab", Err: err}
		}
		cl = client.NewWithKeytab(user, realm, kt, cfg, client.DisablePAFXFAST(true))
	case cred.Password != "":
		cl = client.NewWithPassword(user, realm, cred.Password, cfg, client.DisablePAFXFAST(true))
	default:
		return nil, &Error{Kind: Config, Detail: fmt.Sprintf("Kerberos: no password and no keytab for %s", cred)}
	}
	if err := cl.Login(); err != nil {
		cl.Destroy()
		return nil, classifyKerberos(err, cred, "")
	}
	return cl, nil
}

// krb5Config parses conf, or makes the configuration of a krb5.conf-less
// credential: its realm, KDCs from DNS SRV records.
func krb5Config(conf []byte, realm string) (*config.Config, error) {
	if conf == nil {
		cfg := config.New()
		cfg.LibDefaults.DefaultRealm = realm
		cfg.LibDefaults.DNSLookupKDC = true
		return cfg, nil
	}
	cfg, err := config.NewFromString(string(conf))
	if err != nil {
		// gokrb5 reports unsupported settings (weak enctypes, say) as an
		// error beside a usable configuration.
		var uerr config.UnsupportedDirective
		if cfg == nil || !errors.As(err, &uerr) {
			return nil, &Error{Kind: Config, Detail: "Kerberos: krb5.conf: " + firstLine(err.Error()), Err: err}
		}
	}
	return cfg, nil
}

// kerberosFailures maps the texts gokrb5 reports (the RFC 4120 error code
// names the KDC sent, and gokrb5's own messages) to what failed. gokrb5
// flattens its errors to strings, so the names are matched there; the
// first match wins.
var kerberosFailures = []struct {
	match []string
	kind  Kind
	what  string // %[1]s: the principal; %[2]s: the SPN; %[3]s: the realm
}{
	{[]string{"KDC_ERR_PREAUTH_FAILED", "KRB_AP_ERR_BAD_INTEGRITY", "password/keytab incorrect"}, KDCRefused,
		"wrong password: the KDC refused the password (or keytab key) of %[1]s"},
	{[]string{"KDC_ERR_C_PRINCIPAL_UNKNOWN"}, KDCRefused, "the KDC does not know %[1]s"},
	{[]string{"KDC_ERR_CLIENT_REVOKED"}, KDCRefused, "the KDC says %[1]s is locked or disabled"},
	{[]string{"KDC_ERR_KEY_EXPIRED"}, KDCRefused, "the password of %[1]s has expired"},
	{[]string{"KDC_ERR_S_PRINCIPAL_UNKNOWN"}, NoTicket,
		"no ticket: the KDC knows no service principal %[2]s (set the member's spn= to the proxy's principal)"},
	{[]string{"KRB_AP_ERR_SKEW", "clock skew"}, ClockSkew,
		"clock skew: this host's clock and the KDC's differ by more than the allowed skew (5 minutes unless krb5.conf says otherwise); fix the time sync"},
	{[]string{"KDC_ERR_WRONG_REALM", "client referrals exceeded", "no KDCs defined", "no KDC SRV records"}, WrongRealm,
		"wrong realm %[3]s: its KDC is not of that realm, or none is known for it"},
	{[]string{"matching key not found in keytab"}, Config, "the keytab holds no key for %[1]s (of the encryption types the KDC offers)"},
	{[]string{"KDC_ERR_ETYPE_NOSUPP"}, Config, "the KDC and egret share no encryption type for %[1]s"},
	{[]string{"Networking_Error", "communicate with KDC", "error sending to a KDC", "error resolving KDC"}, KDCUnreachable,
		"KDC unreachable: no KDC of realm %[3]s answered"},
}

// classifyKerberos turns a gokrb5 failure into an *Error naming what
// failed. spn is "" during the login.
func classifyKerberos(err error, cred *credentials.Credential, spn string) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	text := err.Error()
	principal := cred.User
	realm := "(krb5.conf's default realm)"
	if _, r, ok := strings.Cut(cred.User, "@"); ok {
		realm = r
	}
	if spn == "" {
		spn = "(none yet)"
	}
	for _, f := range kerberosFailures {
		for _, m := range f.match {
			if strings.Contains(text, m) {
				what := f.what
				if strings.Contains(what, "%") {
					what = fmt.Sprintf(what, principal, spn, realm)
				}
				e := &Error{Kind: f.kind, Detail: "Kerberos: " + what, Err: err}
				if f.kind == KDCUnreachable {
					cause := networkCause(text)
					e.Timeout = cause == "i/o timeout"
					e.Detail += " (" + cause + ")"
				}
				return e
			}
		}
	}
	return &Error{Kind: KDCRefused, Detail: "Kerberos: " + firstLine(lastCause(text)), Err: err}
}

// networkCause picks the operating system's words out of a gokrb5
// networking error.
func networkCause(text string) string {
	for _, c := range []string{"connection refused", "i/o timeout", "no route to host", "network is unreachable", "no such host"} {
		if strings.Contains(text, c) {
			return c
		}
	}
	return "no answer"
}

// lastCause is the innermost part of gokrb5's "[Root cause: X] a < b < c"
// chains.
func lastCause(s string) string {
	if strings.HasPrefix(s, "[Root cause: ") {
		if i := strings.Index(s, "] "); i >= 0 {
			s = s[i+2:]
		}
	}
	if i := strings.LastIndex(s, " < "); i >= 0 {
		return s[i+3:]
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// negotiateRefusal reads the token of a 407's "Negotiate <token>": a
// SPNEGO answer that rejects egret's ticket is a refusal; anything else
// asks for another round.
func negotiateRefusal(token string) bool {
	b, err := base64.StdEncoding.DecodeString(token)
	if err != nil || len(b) > maxChallenge {
		return false
	}
	isInit, v, err := spnego.UnmarshalNegToken(b)
	if err != nil || isInit {
		return false
	}
	resp, ok := v.(spnego.NegTokenResp)
	return ok && resp.State() == spnego.NegStateReject
}

package credentials

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"sync"
	"sync/atomic"
)

// Credential is what egret presents to upstream proxies: a user name and
// password (Basic, NTLM, Kerberos), and for Kerberos optionally a keytab
// and a krb5.conf; or a bearer token (NewBearer). It is immutable.
type Credential struct {
	User     string
	Password string
	// Keytab is a Kerberos keytab (the file's bytes) holding User's keys,
	// used instead of Password by Negotiate members; nil: none.
	Keytab []byte
	// Krb5Conf is a krb5.conf (its text) naming the realms and their KDCs,
	// for Negotiate members; nil: User's realm, its KDCs found in DNS.
	Krb5Conf []byte
	token    string // a bearer token (NewBearer) instead of a user and password
	header   string
}

// New returns a Credential with its Proxy-Authorization value precomputed.
func New(user, password string) *Credential {
	return &Credential{User: user, Password: password,
		header: "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))}
}

// NewKerberos returns a Credential that also holds a keytab and a
// krb5.conf (either may be nil).
func NewKerberos(user, password string, keytab, krb5conf []byte) *Credential {
	c := New(user, password)
	c.Keytab, c.Krb5Conf = keytab, krb5conf
	return c
}

// AuthHeader is the Proxy-Authorization value ("Basic ...", or
// "Bearer ..." for a token).
func (c *Credential) AuthHeader() string { return c.header }

// Same reports whether c and o hold the same user, password, keytab and
// krb5.conf.
func (c *Credential) Same(o *Credential) bool {
	if c == nil || o == nil {
		return c == o
	}
	return c.User == o.User && c.Password == o.Password &&
		bytes.Equal(c.Keytab, o.Keytab) && (c.Keytab == nil) == (o.Keytab == nil) &&
		bytes.Equal(c.Krb5Conf, o.Krb5Conf) && (c.Krb5Conf == nil) == (o.Krb5Conf == nil) &&
		c.token == o.token
}

// String names the user only (and whether a keytab stands in for the
// password).
func (c *Credential) String() string {
	if c == nil {
		return "<none>"
	}
	if c.token != "" {
		return "bearer token"
	}
	if c.Keytab != nil {
		return "user " + c.User + " (keytab)"
	}
	return "user " + c.User
}

// Format keeps %v, %+v and %#v from printing the password.
func (c *Credential) Format(f fmt.State, verb rune) { fmt.Fprint(f, c.String()) }

type state struct {
	cur, prev *Credential
	confirmed bool // cur has succeeded at least once
}

// Store is the credential shared by the upstream members that have none of
// their own. It is safe for concurrent use; reading it costs one atomic
// load.
type Store struct {
	st     atomic.Pointer[state]
	mu     sync.Mutex // serialises writers
	retire atomic.Pointer[func()]
}

// NewStore returns a Store holding c (which may be nil: no credential yet).
func NewStore(c *Credential) *Store {
	s := &Store{}
	s.st.Store(&state{cur: c})
	return s
}

// Current returns the credential to try first, or nil.
func (s *Store) Current() *Credential { return s.st.Load().cur }

// Fallback returns the previous credential while the current one has not
// yet succeeded, or nil.
func (s *Store) Fallback() *Credential {
	st := s.st.Load()
	if st.confirmed {
		return nil
	}
	return st.prev
}

// OnRetire sets a function run (on the caller's goroutine) whenever a
// credential stops being used: the previous one after the current one
// succeeded. The proxy uses it to close keep-alive connections.
func (s *Store) OnRetire(fn func()) { s.retire.Store(&fn) }

// Set makes c the current credential. The credential that was current
// becomes the fallback if it had worked (or was the only one); otherwise the
// older fallback, the last one known to work, is kept. Set reports whether
// anything changed.
func (s *Store) Set(c *Credential) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.st.Load()
	if old.cur.Same(c) {
		return false
	}
	next := &state{cur: c, prev: old.prev}
	if old.confirmed || old.prev == nil {
		next.prev = old.cur
	}
	if next.prev.Same(c) {
		next.prev = nil // rotated back to the fallback itself
	}
	s.st.Store(next)
	return true
}

// Confirm records that c worked. When c is the current credential and a
// previous one was kept, the previous one is dropped and the retire hook
// runs. Confirm costs one atomic load when there is nothing to do.
func (s *Store) Confirm(c *Credential) {
	st := s.st.Load()
	if st.confirmed || st.cur != c {
		return
	}
	s.mu.Lock()
	st = s.st.Load()
	if st.confirmed || st.cur != c {
		s.mu.Unlock()
		return
	}
	s.st.Store(&state{cur: st.cur, confirmed: true})
	hadPrev := st.prev != nil
	s.mu.Unlock()
	if hadPrev {
		if fn := s.retire.Load(); fn != nil && *fn != nil {
			(*fn)()
		}
	}
}

// Rotating reports whether a new credential is waiting for its first
// success while the previous one is kept as a fallback.
func (s *Store) Rotating() bool {
	st := s.st.Load()
	return !st.confirmed && st.prev != nil
}

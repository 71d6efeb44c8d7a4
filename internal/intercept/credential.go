package intercept

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
	"time"

	"egret.io/egret/internal/watch"
)

// Scheme is how a credential is written into its header.
type Scheme uint8

// The schemes.
const (
	// Bearer writes "Bearer TOKEN" (the header defaults to Authorization).
	Bearer Scheme = iota
	// Basic writes "Basic base64(USER:PASSWORD)" from two files.
	Basic
	// Raw writes the file's content as the whole value (x-api-key: KEY).
	Raw
)

func (s Scheme) String() string {
	switch s {
	case Bearer:
		return "bearer"
	case Basic:
		return "basic"
	case Raw:
		return "raw"
	}
	return fmt.Sprintf("unknown(%d)", uint8(s))
}

// Defaults of a credential's files (the keys of its Secret).
const (
	TokenFile    = "token"
	UsernameFile = "username"
	PasswordFile = "password"
	// maxSecretFile bounds what is read of a credential file.
	maxSecretFile = 16 << 10
)

// CredentialSpec says which header egret sets for a destination and where
// the value comes from: files of a mounted Secret.
type CredentialSpec struct {
	// Name is how logs, status and errors name the credential (a Secret's
	// namespace/name); never its value.
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// Header is the header egret sets, replacing any the client sent;
	// Authorization by default.
	Header string `json:"header,omitempty" yaml:"header,omitempty"`
	// Scheme is bearer (the default), basic or raw.
	Scheme string `json:"scheme,omitempty" yaml:"scheme,omitempty"`
	// Files are the files holding the value: one (the token or raw value;
	// default DIR/token) or, for basic, the user name and the password
	// (default DIR/username and DIR/password).
	Files []string `json:"files,omitempty" yaml:"files,omitempty"`
}

// headers egret never sets for a client: framing, routing and hop-by-hop
// fields, which decide how a message is read or where it goes.
var reservedHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Te": true,
	"Trailer": true, "Upgrade": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Proxy-Authorization": true, "Proxy-Authenticate": true, "Expect": true, "Via": true,
}

// secret is a credential value; it prints as a placeholder whatever the verb.
type secret string

func (secret) String() string                  { return "[credential]" }
func (s secret) Format(f fmt.State, verb rune) { fmt.Fprint(f, s.String()) }
func (secret) GoString() string                { return "[credential]" }
func (s secret) MarshalText() ([]byte, error)  { return []byte(s.String()), nil }

// Credential is one injected header whose value comes from files that are
// re-read when the kubelet updates the Secret. It is safe for concurrent
// use; reading the value costs one atomic load.
type Credential struct {
	// Name names it in logs; Header is the canonical header name.
	Name   string
	Header string
	Scheme Scheme
	// Files are the files read, in the order of CredentialSpec.Files.
	Files []string
	// Interval is the safety-net re-read period; zero means
	// watch.DefaultInterval.
	Interval time.Duration
	// Reloaded, when set, is called after each reload attempt that found
	// new content, with nil or the reason it was refused (never holding the
	// value; the previous value stays in force).
	Reloaded func(err error)

	val atomic.Pointer[secret]
	w   *watch.Files
}

// NewCredential checks a spec; dir is where a spec without Files finds the
// Secret's default keys. The files are not read yet (Load).
func NewCredential(s CredentialSpec, dir string) (*Credential, error) {
	c := &Credential{Name: s.Name}
	switch strings.ToLower(s.Scheme) {
	case "", "bearer":
		c.Scheme = Bearer
	case "basic":
		c.Scheme = Basic
	case "raw", "header":
		c.Scheme = Raw
	default:
		return nil, fmt.Errorf("credential %s: scheme %q: want bearer, basic or raw", s.Name, s.Scheme)
	}
	h := s.Header
	if h == "" {
		if c.Scheme == Raw {
			return nil, fmt.Errorf("credential %s: a raw credential needs a header name (such as x-api-key)", s.Name)
		}
		h = "Authorization"
	}
	if !isToken(h) || len(h) > 64 {
		return nil, fmt.Errorf("credential %s: %q is not a header name", s.Name, h)
	}
	c.Header = textproto.CanonicalMIMEHeaderKey(h)
	if reservedHeaders[c.Header] {
		return nil, fmt.Errorf("credential %s: egret does not set %s for a client (it decides how the request is framed or routed)", s.Name, c.Header)
	}
	c.Files = s.Files
	want := 1
	if c.Scheme == Basic {
		want = 2
	}
	if len(c.Files) == 0 {
		if dir == "" {
			return nil, fmt.Errorf("credential %s: no files", s.Name)
		}
		if c.Scheme == Basic {
			c.Files = []string{dir + "/" + UsernameFile, dir + "/" + PasswordFile}
		} else {
			c.Files = []string{dir + "/" + TokenFile}
		}
	}
	if len(c.Files) != want {
		return nil, fmt.Errorf("credential %s: a %s credential reads %d file(s), not %d", s.Name, c.Scheme, want, len(c.Files))
	}
	return c, nil
}

func (c *Credential) files() *watch.Files {
	if c.w == nil {
		c.w = &watch.Files{
			Paths:    c.Files,
			Interval: c.Interval,
			Load: func(b [][]byte) error {
				v, err := c.value(b)
				if err != nil {
					return err
				}
				c.val.Store(&v)
				if c.Reloaded != nil {
					c.Reloaded(nil)
				}
				return nil
			},
			Failed: func(err error) {
				if c.Reloaded != nil {
					c.Reloaded(fmt.Errorf("credential %s: %w", c.Name, err))
				}
			},
		}
	}
	return c.w
}

// Load reads the files once.
func (c *Credential) Load() error {
	b, err := c.files().Read()
	if err != nil {
		return fmt.Errorf("credential %s: %w", c.Name, err)
	}
	v, err := c.value(b)
	if err != nil {
		return fmt.Errorf("credential %s: %w", c.Name, err)
	}
	c.val.Store(&v)
	return nil
}

// Run re-reads the files on change until ctx ends (after Load, or loading
// first).
func (c *Credential) Run(ctx context.Context) error { return c.files().Run(ctx) }

// Set builds the value from the contents of its sources (in the order of
// Files) and puts it in force: a credential whose value comes from
// elsewhere than files (a Secret read from the API server). On an error,
// which names the source and never the content, the previous value stays.
func (c *Credential) Set(parts [][]byte) error {
	if len(parts) != len(c.Files) {
		return fmt.Errorf("credential %s: %d values for %d sources", c.Name, len(parts), len(c.Files))
	}
	v, err := c.value(parts)
	if err != nil {
		return fmt.Errorf("credential %s: %w", c.Name, err)
	}
	c.val.Store(&v)
	return nil
}

// Clear drops the value: requests that need it are refused until the next
// Set (its Secret was deleted).
func (c *Credential) Clear() { c.val.Store(nil) }

// Loaded reports whether a value is held.
func (c *Credential) Loaded() bool { return c.val.Load() != nil }

// String names the credential, never its value.
func (c *Credential) String() string {
	return fmt.Sprintf("credential %s (%s %s)", c.Name, c.Header, c.Scheme)
}

// errNotLoaded: no value was ever read; the request is refused rather than
// sent without the credential (or with the client's own).
var errNotLoaded = errors.New("the credential has not been loaded")

// Apply removes every value the client sent for the header and sets egret's.
// A header whose name differs only in case or in '_' for '-' (X_Api_Key
// beside X-Api-Key) goes too: CGI and WSGI servers map both spellings to
// one variable, and which one wins is the server's choice, not egret's.
func (c *Credential) Apply(h http.Header) error {
	v := c.val.Load()
	if v == nil {
		return errNotLoaded
	}
	for k := range h {
		if k != c.Header && sameHeaderVariable(k, c.Header) {
			delete(h, k)
		}
	}
	h[c.Header] = []string{string(*v)}
	return nil
}

// sameHeaderVariable reports whether a and b name one CGI variable
// (HTTP_X_API_KEY): equal but for case and '_' against '-'.
func sameHeaderVariable(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// value builds the header value from the files' contents. Errors name the
// problem, never the content.
func (c *Credential) value(files [][]byte) (secret, error) {
	for i, b := range files {
		if len(b) > maxSecretFile {
			return "", fmt.Errorf("%s is larger than %d bytes", c.Files[i], maxSecretFile)
		}
	}
	switch c.Scheme {
	case Basic:
		u, p := trimNewline(files[0]), trimNewline(files[1])
		if len(u) == 0 {
			return "", fmt.Errorf("%s is empty", c.Files[0])
		}
		if bytes.IndexByte(u, ':') >= 0 {
			return "", fmt.Errorf("%s holds a colon, which Basic authentication cannot carry in a user name", c.Files[0])
		}
		for i, b := range [][]byte{u, p} {
			if err := printable(b); err != nil {
				return "", fmt.Errorf("%s %w", c.Files[i], err)
			}
		}
		return secret("Basic " + base64.StdEncoding.EncodeToString(append(append(u, ':'), p...))), nil
	default:
		v := bytes.TrimSpace(files[0])
		if len(v) == 0 {
			return "", fmt.Errorf("%s is empty", c.Files[0])
		}
		if err := printable(v); err != nil {
			return "", fmt.Errorf("%s %w", c.Files[0], err)
		}
		if c.Scheme == Bearer {
			if bytes.ContainsAny(v, " \t") {
				return "", fmt.Errorf("%s holds more than one word (a bearer token is one)", c.Files[0])
			}
			return secret("Bearer " + string(v)), nil
		}
		return secret(v), nil
	}
}

func trimNewline(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// printable refuses what cannot travel in a header field value: line
// breaks, NUL and other control characters (a tab is allowed).
func printable(b []byte) error {
	for _, c := range b {
		if c == '\r' || c == '\n' {
			return errors.New("holds a line break")
		}
		if c < 0x20 && c != '\t' || c == 0x7f {
			return errors.New("holds a control character")
		}
	}
	return nil
}

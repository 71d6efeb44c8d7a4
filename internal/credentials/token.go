package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"egret.io/egret/internal/watch"
)

// NewBearer returns a Credential that presents token as a bearer token
// (Proxy-Authorization: Bearer): an egret sidecar's projected
// service-account token, which the gateway verifies. It has no user name
// or password, and prints as "bearer token".
func NewBearer(token string) *Credential {
	return &Credential{token: token, header: "Bearer " + token}
}

// IsBearer reports whether c presents a bearer token.
func (c *Credential) IsBearer() bool { return c != nil && c.token != "" }

// TokenFile keeps a Store in step with a file holding a bearer token: a
// projected service-account token volume, which the kubelet refreshes
// before the token expires.
type TokenFile struct {
	// Path is the token file.
	Path string
	// Interval is the safety-net re-read period; zero means
	// watch.DefaultInterval.
	Interval time.Duration
	// Store receives the credential.
	Store *Store
	// Reloaded, when set, is called after every reload attempt that found
	// new content, with nil or the reason it was refused. The error never
	// holds the token.
	Reloaded func(err error)

	w *watch.Files
}

func (t *TokenFile) files() *watch.Files {
	if t.w == nil {
		t.w = &watch.Files{
			Paths:    []string{t.Path},
			Interval: t.Interval,
			Load: func(c [][]byte) error {
				cred, err := parseToken(c[0])
				if err != nil {
					return err
				}
				t.Store.Set(cred)
				if t.Reloaded != nil {
					t.Reloaded(nil)
				}
				return nil
			},
			Failed: func(err error) {
				if t.Reloaded != nil {
					t.Reloaded(fmt.Errorf("token file %s: %w", t.Path, err))
				}
			},
		}
	}
	return t.w
}

// Load reads the file once and puts the credential into the Store.
func (t *TokenFile) Load() error {
	c, err := t.files().Read()
	if err != nil {
		return fmt.Errorf("token file %s: %w", t.Path, err)
	}
	cred, err := parseToken(c[0])
	if err != nil {
		return fmt.Errorf("token file %s: %w", t.Path, err)
	}
	t.Store.Set(cred)
	return nil
}

// Run re-reads the file on change until ctx ends.
func (t *TokenFile) Run(ctx context.Context) error { return t.files().Run(ctx) }

// parseToken reads a token file: one line, a trailing newline removed.
func parseToken(b []byte) (*Credential, error) {
	tok := bytes.TrimSpace(b)
	switch {
	case len(tok) == 0:
		return nil, errors.New("the token file is empty")
	case bytes.ContainsAny(tok, " \t\r\n"):
		return nil, errors.New("the token file holds more than one word")
	}
	for _, c := range tok {
		if c < 0x21 || c > 0x7e {
			return nil, errors.New("the token holds a character that cannot go in a header")
		}
	}
	return NewBearer(string(tok)), nil
}

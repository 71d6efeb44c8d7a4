package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"egret.io/egret/internal/watch"
)

// DefaultDir is where a Secret with "username" and "password" keys is
// mounted by convention; it is used when present and PROXY_CREDENTIALS_DIR
// is not set.
const DefaultDir = "/var/run/secrets/proxy"

// File names inside the directory (the Secret's keys). The username file
// is required; the password file too unless a keytab stands in for it
// (Negotiate members); keytab and krb5.conf serve Negotiate members.
const (
	UserFile     = "username"
	PasswordFile = "password"
	KeytabFile   = "keytab"
	Krb5ConfFile = "krb5.conf"
)

// Dir keeps a Store in step with the files of a credentials directory.
type Dir struct {
	// Path is the directory.
	Path string
	// Interval is the safety-net re-read period; zero means
	// watch.DefaultInterval.
	Interval time.Duration
	// Store receives the credential.
	Store *Store
	// Reloaded, when set, is called after every reload attempt that found
	// new content, with nil or the reason it was refused. The error never
	// holds the password.
	Reloaded func(err error)

	w *watch.Files
}

func (d *Dir) files() *watch.Files {
	if d.w == nil {
		pw, kt, conf := filepath.Join(d.Path, PasswordFile), filepath.Join(d.Path, KeytabFile), filepath.Join(d.Path, Krb5ConfFile)
		d.w = &watch.Files{
			Paths:    []string{filepath.Join(d.Path, UserFile), pw, kt, conf},
			Optional: []string{pw, kt, conf},
			Interval: d.Interval,
			Load: func(c [][]byte) error {
				cred, err := parse(c[0], c[1], c[2], c[3])
				if err != nil {
					return err
				}
				d.Store.Set(cred)
				if d.Reloaded != nil {
					d.Reloaded(nil)
				}
				return nil
			},
			Failed: func(err error) {
				if d.Reloaded != nil {
					d.Reloaded(fmt.Errorf("credentials %s: %w", d.Path, err))
				}
			},
		}
	}
	return d.w
}

// Load reads the directory once and puts the credential into the Store.
func (d *Dir) Load() error {
	c, err := d.files().Read()
	if err != nil {
		return fmt.Errorf("credentials %s: %w", d.Path, err)
	}
	cred, err := parse(c[0], c[1], c[2], c[3])
	if err != nil {
		return fmt.Errorf("credentials %s: %w", d.Path, err)
	}
	d.Store.Set(cred)
	return nil
}

// Run re-reads the directory on change until ctx ends.
func (d *Dir) Run(ctx context.Context) error { return d.files().Run(ctx) }

// parse reads the files (nil: missing). A single trailing newline (from
// `echo` or an editor) is removed from the user name and the password;
// anything else is taken as it is.
func parse(user, pass, keytab, krb5conf []byte) (*Credential, error) {
	u, p := trimNL(user), trimNL(pass)
	if len(u) == 0 {
		return nil, errors.New("the username file is empty")
	}
	if bytes.ContainsAny(u, ":\r\n") {
		return nil, errors.New("the username holds a colon or a line break, which Basic authentication cannot carry")
	}
	if pass == nil && keytab == nil {
		return nil, errors.New("read password: the file is missing (a keytab file stands in for it only for Kerberos)")
	}
	if bytes.ContainsAny(p, "\r\n") {
		return nil, errors.New("the password file holds more than one line")
	}
	if keytab != nil && len(keytab) == 0 {
		return nil, errors.New("the keytab file is empty")
	}
	if keytab == nil && krb5conf == nil {
		return New(string(u), string(p)), nil
	}
	return NewKerberos(string(u), string(p), keytab, krb5conf), nil
}

func trimNL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// Present reports whether dir exists and holds a username file, for the
// default directory's "when present" rule.
func Present(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, UserFile))
	return err == nil
}

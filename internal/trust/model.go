package trust

import (
	"fmt"
	"strings"

	"egret.io/egret/internal/noproxy"
)

// Effect says what a runtime does with the CA file a setting names.
type Effect uint8

// The effects of a CA setting.
const (
	// Replaces: the file is the whole trust; the runtime's default roots
	// are no longer used (a file with only the corporate CA breaks every
	// endpoint that is not intercepted).
	Replaces Effect = iota + 1
	// Adds: the file's certificates are trusted besides the default roots.
	Adds
)

// String returns "replaces" or "adds".
func (e Effect) String() string {
	switch e {
	case Replaces:
		return "replaces"
	case Adds:
		return "adds"
	default:
		return fmt.Sprintf("unknown(%d)", uint8(e))
	}
}

// Reread says when a runtime reads its CA file again after it changed
// (kubelet swaps a ConfigMap volume's files atomically about a minute after
// the ConfigMap changed).
type Reread uint8

// When the CA file is read.
const (
	// ReadOnce: once per process; restart the process to use a new bundle.
	ReadOnce Reread = iota + 1
	// ReadPerConnection: again for every new TLS connection (connections
	// kept alive keep the trust they were made with).
	ReadPerConnection
	// ReadPerRun: again by every run of the command (short-lived tools).
	ReadPerRun
	// ReadPolled: the runtime checks the file's modification time and
	// reloads it by itself.
	ReadPolled
)

// String names the rule.
func (r Reread) String() string {
	switch r {
	case ReadOnce:
		return "once per process (restart)"
	case ReadPerConnection:
		return "per new connection"
	case ReadPerRun:
		return "per run"
	case ReadPolled:
		return "polled"
	default:
		return fmt.Sprintf("unknown(%d)", uint8(r))
	}
}

// NeedsRestart reports whether a process must be restarted to use a changed
// bundle.
func (r Reread) NeedsRestart() bool { return r == ReadOnce }

// Verification says how a row of the model was checked.
type Verification uint8

// How a runtime's row was checked.
const (
	// VerifiedReal: the real runtime is run by this package's tests (which
	// fail, not skip, under EGRET_REQUIRE_ALL=1 when it is missing).
	VerifiedReal Verification = iota + 1
	// VerifiedModelled: read from the source named in the row; not run.
	VerifiedModelled
)

// String returns "real" or "modelled from source".
func (v Verification) String() string {
	switch v {
	case VerifiedReal:
		return "real"
	case VerifiedModelled:
		return "modelled from source"
	default:
		return fmt.Sprintf("unknown(%d)", uint8(v))
	}
}

// Kind is where a setting lives.
type Kind uint8

// The kinds of settings.
const (
	EnvVar       Kind = iota + 1 // an environment variable holding a path
	JavaProperty                 // a -D system property (JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS or the command line)
)

// Setting is one place a runtime reads its CA file from.
type Setting struct {
	Kind   Kind
	Name   string // SSL_CERT_FILE, javax.net.ssl.trustStore
	Effect Effect // what the file does to the default file
	// Dir is a default certificate directory the runtime still searches
	// when this setting is used ("" when none). Images that keep their
	// roots there (Debian, Ubuntu, Alpine, distroless, UBI) then still
	// trust them, so a file that replaces the default file in effect adds.
	Dir string
}

// KeepsDefaults reports whether, with this setting pointing at the
// corporate CAs alone, public endpoints still verify in an image that keeps
// its roots in the usual directories.
func (s Setting) KeepsDefaults() bool { return s.Effect == Adds || s.Dir != "" }

// String writes the setting as a user writes it: SSL_CERT_FILE or
// -Djavax.net.ssl.trustStore.
func (s Setting) String() string {
	if s.Kind == JavaProperty {
		return "-D" + s.Name
	}
	return s.Name
}

// Runtime is the model of how one runtime (family and version range) finds
// its CA certificates. A row is data; Resolve reads it.
type Runtime struct {
	// Name is the stable identifier ("go", "python-requests").
	Name string
	// Description says what it stands for, with versions.
	Description string
	// Settings are read in this order; the first one set wins.
	Settings []Setting
	// Default is what the runtime trusts when no setting is set.
	Default string
	// Reread says when a changed file is read again.
	Reread Reread
	// Verified says how the row was checked.
	Verified Verification
	// Sources are the documentation pages or source files the row comes from.
	Sources []string
	// Note is what else matters, in a sentence or two.
	Note string
}

// Env is a process environment (name → value), as noproxy.Env.
type Env = noproxy.Env

// Choice is what Resolve found: the file a runtime will read.
type Choice struct {
	Runtime string
	// Setting is the setting that applies; its zero value means the
	// runtime's defaults.
	Setting Setting
	// Path is the file the setting names ("" for the defaults).
	Path string
	// Reason says why, naming the variable.
	Reason string
}

// Custom reports whether a setting (not the defaults) decides the trust.
func (c Choice) Custom() bool { return c.Setting.Name != "" }

// Resolve says which file r reads in env. Java properties are read as
// JavaProps reads them; extra are the command line's words.
func Resolve(r Runtime, env Env, extra ...string) Choice {
	props := JavaProps(env, extra...)
	for _, s := range r.Settings {
		switch s.Kind {
		case EnvVar:
			if v := env[s.Name]; v != "" {
				return Choice{Runtime: r.Name, Setting: s, Path: v,
					Reason: fmt.Sprintf("%s=%s (%s the default roots)", s.Name, v, s.Effect)}
			}
		case JavaProperty:
			if v := props[s.Name]; v != "" {
				return Choice{Runtime: r.Name, Setting: s, Path: v,
					Reason: fmt.Sprintf("-D%s=%s (%s the default roots)", s.Name, v, s.Effect)}
			}
		}
	}
	names := make([]string, len(r.Settings))
	for i, s := range r.Settings {
		names[i] = s.String()
	}
	return Choice{Runtime: r.Name, Reason: fmt.Sprintf("%s unset: %s", strings.Join(names, ", "), r.Default)}
}

// JavaProps returns the -Dkey=value properties a JVM sees, in the order the
// JVM applies them (a later definition wins): JAVA_TOOL_OPTIONS,
// JDK_JAVA_OPTIONS (the java launcher puts it before the command line),
// extra (the command line's words), _JAVA_OPTIONS.
func JavaProps(env Env, extra ...string) map[string]string {
	out := map[string]string{}
	words := append(noproxy.SplitJavaOptions(env["JAVA_TOOL_OPTIONS"]), noproxy.SplitJavaOptions(env["JDK_JAVA_OPTIONS"])...)
	for _, e := range extra {
		words = append(words, noproxy.SplitJavaOptions(e)...)
	}
	words = append(words, noproxy.SplitJavaOptions(env["_JAVA_OPTIONS"])...)
	for _, w := range words {
		if k, v, ok := strings.Cut(strings.TrimPrefix(w, "-D"), "="); ok && strings.HasPrefix(w, "-D") && k != "" {
			out[k] = v
		}
	}
	return out
}

// RuntimeByName finds a runtime's row.
func RuntimeByName(name string) (Runtime, bool) {
	for _, r := range Runtimes() {
		if r.Name == name {
			return r, true
		}
	}
	return Runtime{}, false
}

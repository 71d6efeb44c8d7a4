package kubenode

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultUnitDirs is the systemd system unit search path, highest
// precedence first.
var DefaultUnitDirs = []string{
	"/etc/systemd/system.control",
	"/run/systemd/system.control",
	"/run/systemd/transient",
	"/etc/systemd/system",
	"/run/systemd/system",
	"/usr/local/lib/systemd/system",
	"/usr/lib/systemd/system",
	"/lib/systemd/system",
}

// UnitEnv is the environment a unit's files configure.
type UnitEnv struct {
	Files []string          // unit file and drop-ins read, in the order systemd applies them
	Env   map[string]string // the resulting variables (Environment=, then EnvironmentFile= on top)
	// Missing lists EnvironmentFile= files that do not exist (a "-" prefix
	// makes that allowed).
	Missing []string
	// Newest is the latest modification among Files and environment files.
	Newest fileTime
}

type fileTime struct {
	Path string
	Unix int64 // seconds
}

// LoadUnitEnv reads unit (e.g. "containerd.service") and its drop-ins from
// dirs (highest precedence first; nil: DefaultUnitDirs) and evaluates its
// [Service] Environment= and EnvironmentFile= settings as systemd does.
func LoadUnitEnv(unit string, dirs []string) (*UnitEnv, error) {
	if dirs == nil {
		dirs = DefaultUnitDirs
	}
	ue := &UnitEnv{Env: map[string]string{}}
	// The unit file: the first one found wins.
	for _, d := range dirs {
		p := filepath.Join(d, unit)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			ue.Files = append(ue.Files, p)
			break
		}
	}
	// Drop-ins: <unit>.d/*.conf and service.d/*.conf in every directory; a
	// name in a higher-precedence directory masks the same name below; all
	// are applied sorted by file name.
	dropins := map[string]string{}
	for _, d := range dirs {
		for _, sub := range []string{unit + ".d", typeDir(unit)} {
			entries, err := os.ReadDir(filepath.Join(d, sub))
			if err != nil {
				continue
			}
			for _, e := range entries {
				if !strings.HasSuffix(e.Name(), ".conf") || e.IsDir() {
					continue
				}
				if _, ok := dropins[e.Name()]; !ok {
					dropins[e.Name()] = filepath.Join(d, sub, e.Name())
				}
			}
		}
	}
	names := make([]string, 0, len(dropins))
	for n := range dropins {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ue.Files = append(ue.Files, dropins[n])
	}
	if len(ue.Files) == 0 {
		return ue, nil
	}
	var assigns [][2]string
	var envFiles []string
	for _, f := range ue.Files {
		ue.touch(f)
		settings, err := readServiceSettings(f)
		if err != nil {
			return nil, err
		}
		for _, s := range settings {
			switch s[0] {
			case "Environment":
				if strings.TrimSpace(s[1]) == "" {
					assigns = nil // an empty assignment resets the list
					continue
				}
				for _, w := range splitSystemdWords(s[1]) {
					if k, v, ok := strings.Cut(w, "="); ok && validEnvName(k) {
						assigns = append(assigns, [2]string{k, v})
					}
				}
			case "EnvironmentFile":
				if strings.TrimSpace(s[1]) == "" {
					envFiles = nil
					continue
				}
				envFiles = append(envFiles, strings.TrimSpace(s[1]))
			}
		}
	}
	for _, kv := range assigns {
		ue.Env[kv[0]] = kv[1]
	}
	for _, ef := range envFiles {
		optional := strings.HasPrefix(ef, "-")
		p := strings.TrimPrefix(ef, "-")
		vars, err := readEnvFile(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				if !optional {
					ue.Missing = append(ue.Missing, p)
				}
				continue
			}
			return nil, err
		}
		ue.touch(p)
		for k, v := range vars {
			ue.Env[k] = v
		}
	}
	return ue, nil
}

func (ue *UnitEnv) touch(p string) {
	if st, err := os.Stat(p); err == nil && st.ModTime().Unix() > ue.Newest.Unix {
		ue.Newest = fileTime{Path: p, Unix: st.ModTime().Unix()}
	}
}

// typeDir returns "service.d" for "x.service".
func typeDir(unit string) string {
	if i := strings.LastIndexByte(unit, '.'); i >= 0 {
		return unit[i+1:] + ".d"
	}
	return unit + ".d"
}

// readServiceSettings returns the (key, value) settings of the [Service]
// section of a unit file, in order, with continuation lines joined and %%
// specifiers resolved.
func readServiceSettings(path string) ([][2]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	var out [][2]string
	section := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var cont strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if cont.Len() == 0 {
			t := strings.TrimSpace(line)
			if t == "" || t[0] == '#' || t[0] == ';' {
				continue
			}
		}
		if strings.HasSuffix(line, `\`) {
			cont.WriteString(strings.TrimSuffix(line, `\`))
			cont.WriteByte(' ')
			continue
		}
		cont.WriteString(line)
		full := strings.TrimSpace(cont.String())
		cont.Reset()
		if strings.HasPrefix(full, "[") && strings.HasSuffix(full, "]") {
			section = full[1 : len(full)-1]
			continue
		}
		if section != "Service" {
			continue
		}
		k, v, ok := strings.Cut(full, "=")
		if !ok {
			continue
		}
		out = append(out, [2]string{strings.TrimSpace(k), strings.ReplaceAll(strings.TrimSpace(v), "%%", "%")})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// splitSystemdWords splits an Environment= value into words: blanks
// separate, double and single quotes group, and C escapes (\\, \", \', \n,
// \t, \xNN) are resolved.
func splitSystemdWords(s string) []string {
	var out []string
	var b strings.Builder
	in := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			switch e := s[i]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'x':
				if i+2 < len(s) {
					var v byte
					if _, err := fmt.Sscanf(s[i+1:i+3], "%02x", &v); err == nil {
						b.WriteByte(v)
						i += 2
						break
					}
				}
				b.WriteByte('x')
			default:
				b.WriteByte(e)
			}
			in = true
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			b.WriteByte(c)
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
	}
	return out
}

// readEnvFile reads a systemd EnvironmentFile: KEY=VALUE lines, # and ;
// comments, single quotes literal, double quotes with \ escapes for
// \ " $ `, unquoted values trimmed.
func readEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || t[0] == '#' || t[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(t, "=")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		v = strings.TrimSpace(v)
		if !validEnvName(k) {
			continue // systemd ignores invalid assignments
		}
		switch {
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			v = v[1 : len(v)-1]
		case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
			var b strings.Builder
			in := v[1 : len(v)-1]
			for i := 0; i < len(in); i++ {
				if in[i] == '\\' && i+1 < len(in) && strings.IndexByte("\\\"$`", in[i+1]) >= 0 {
					i++
				}
				b.WriteByte(in[i])
			}
			v = b.String()
		}
		out[k] = v
	}
	return out, nil
}

// validEnvName reports whether systemd accepts k as a variable name: letters,
// digits and '_', not starting with a digit.
func validEnvName(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

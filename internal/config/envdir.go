package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The settings directory (EGRET_ENV_DIR): a mounted Secret or ConfigMap
// whose keys are names of settings, UPSTREAM_PROXY=... as a file named
// UPSTREAM_PROXY. It is read as if its files were environment variables
// below the real environment (as a container's env wins over its
// envFrom), every time the configuration is loaded: a process that watches
// the directory and reloads on change (egret proxy does) follows the
// Secret as it appears, changes or goes, where envFrom would have frozen it
// at the container's start.

// EnvDirKey is the setting that names the directory.
const EnvDirKey = "EGRET_ENV_DIR"

// envDirExtra are the variables egret reads that are no Key of their own.
var envDirExtra = []string{"NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"}

// EnvDirNames returns the file names a settings directory is read for:
// every setting's variable and alias (EGRET_ENV_DIR itself aside) and the
// proxy variables egret reads.
func EnvDirNames() []string {
	var out []string
	for _, k := range Keys {
		if k.Env == EnvDirKey {
			continue
		}
		out = append(out, k.Env)
		out = append(out, k.Aliases...)
	}
	return append(out, envDirExtra...)
}

// envDir is a settings directory as read.
type envDir struct {
	path   string
	values map[string]string
	unused []string // files that are no setting (names only: they may hold secrets)
}

// readEnvDir reads the settings directory. A directory that does not exist
// is an error (a mistyped path would silently drop settings); an empty one
// is not (a mounted optional Secret that does not exist yet). Hidden
// entries (the kubelet's ..data and timestamped directories) are skipped;
// one trailing line break is removed from each value.
func readEnvDir(path string, read func(string) ([]byte, error)) (*envDir, error) {
	entries, err := os.ReadDir(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s %s: no such directory (mount the Secret or ConfigMap there, or unset %s)", EnvDirKey, path, EnvDirKey)
		}
		return nil, fmt.Errorf("%s %s: %w", EnvDirKey, path, unwrapPathErr(err))
	}
	d := &envDir{path: path, values: map[string]string{}}
	known := EnvDirNames()
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		if !slices.Contains(known, name) {
			d.unused = append(d.unused, name)
			continue
		}
		b, err := read(filepath.Join(path, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a key's link left behind while the kubelet swaps the volume
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", EnvDirKey, name, unwrapPathErr(err))
		}
		b = bytes.TrimSuffix(b, []byte("\n"))
		b = bytes.TrimSuffix(b, []byte("\r"))
		d.values[name] = string(b)
	}
	sort.Strings(d.unused)
	return d, nil
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// layer returns env with the directory's values under it, and the notes
// to log: files that are no setting, and values the environment overrides.
func (d *envDir) layer(env func(string) (string, bool)) (func(string) (string, bool), []string) {
	var notes []string
	if len(d.unused) > 0 {
		notes = append(notes, fmt.Sprintf("%s %s: %s not read: no setting of egret proxy has that name", EnvDirKey, d.path, strings.Join(d.unused, ", ")))
	}
	var shadowed []string
	for name := range d.values {
		if v, ok := env(name); ok && v != "" {
			shadowed = append(shadowed, name)
		}
	}
	if len(shadowed) > 0 {
		sort.Strings(shadowed)
		notes = append(notes, fmt.Sprintf("%s %s: %s also set in the environment, which wins", EnvDirKey, d.path, strings.Join(shadowed, ", ")))
	}
	return func(k string) (string, bool) {
		if v, ok := env(k); ok && v != "" {
			return v, ok
		}
		v, ok := d.values[k]
		return v, ok
	}, notes
}

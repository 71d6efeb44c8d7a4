package kubenode

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Proc reads processes from a /proc file system.
type Proc struct {
	// Root is the proc mount; "" means "/proc".
	Root string
}

func (p Proc) root() string {
	if p.Root == "" {
		return "/proc"
	}
	return p.Root
}

// ErrNoProcess is returned by Find when no process has the name.
var ErrNoProcess = errors.New("no such process")

// Find returns the pids of the processes named name: their command name
// (/proc/PID/comm, cut at 15 characters by the kernel) or the base name of
// their first argument. The caller's own process is never returned.
func (p Proc) Find(name string) ([]int, error) {
	entries, err := os.ReadDir(p.root())
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if p.nameMatches(pid, name) {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	if len(pids) == 0 {
		return nil, fmt.Errorf("%s: %w", name, ErrNoProcess)
	}
	return pids, nil
}

func (p Proc) nameMatches(pid int, name string) bool {
	dir := filepath.Join(p.root(), strconv.Itoa(pid))
	if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil && len(name) <= 15 && strings.TrimSpace(string(comm)) == name {
		return true
	}
	cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil || len(cmd) == 0 {
		return false
	}
	argv0, _, _ := bytes.Cut(cmd, []byte{0})
	return filepath.Base(string(argv0)) == name
}

// Environ returns the environment a process was started with.
func (p Proc) Environ(pid int) (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(p.root(), strconv.Itoa(pid), "environ"))
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("read the environment of pid %d: permission denied (run as root)", pid)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("read the environment of pid %d: %w", pid, err)
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if ok && len(k) > 0 {
			env[string(k)] = string(v)
		}
	}
	return env, nil
}

// Name returns the command name of a process.
func (p Proc) Name(pid int) string {
	comm, err := os.ReadFile(filepath.Join(p.root(), strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(comm))
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times on Linux.
const clockTicks = 100

// Started returns when a process started (zero when unknown).
func (p Proc) Started(pid int) time.Time {
	stat, err := os.ReadFile(filepath.Join(p.root(), strconv.Itoa(pid), "stat"))
	if err != nil {
		return time.Time{}
	}
	// The command name (field 2) may hold spaces and parentheses: skip to the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}
	}
	fields := strings.Fields(string(stat[i+1:]))
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return time.Time{}
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return time.Time{}
	}
	btime := p.bootTime()
	if btime.IsZero() {
		return time.Time{}
	}
	return btime.Add(time.Duration(ticks) * time.Second / clockTicks)
}

func (p Proc) bootTime() time.Time {
	data, err := os.ReadFile(filepath.Join(p.root(), "stat"))
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(s, 0)
			}
		}
	}
	return time.Time{}
}

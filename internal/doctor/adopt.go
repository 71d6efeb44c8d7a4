package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// defaultPATH is what a process without PATH searches (glibc's and Go's
// os/exec default in a container image).
const defaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// adopt returns d with the windows of the process pid, for `kubectl debug
// --target`: an ephemeral container shares the target container's process
// namespace, so the application is a process here whose environment is
// PROC/PID/environ and whose root file system is PROC/PID/root, while the
// network (the pod's) is already the same. The checks then run with the
// application's environment, find its runtimes on its PATH inside its root
// (and from its executable: a distroless image has little on PATH), read
// its resolv.conf and CA files, and the pid1-env check says which process
// was adopted.
func adopt(d Deps, pid int) (Deps, error) {
	if pid < 1 {
		return d, fmt.Errorf("%d is not a process ID", pid)
	}
	proc := d.Proc
	if proc == "" {
		proc = "/proc"
	}
	dir := filepath.Join(proc, strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(dir, "environ"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return d, fmt.Errorf("no process %d here (%s): with kubectl debug, pass --target=<container> so the debug container shares its processes", pid, dir)
	case errors.Is(err, fs.ErrPermission):
		return d, fmt.Errorf("cannot read %s/environ: permission denied: the process runs as another user; run the debug container as root with SYS_PTRACE (docs/doctor.md shows the kubectl debug command) or as the application's user", dir)
	case err != nil:
		return d, fmt.Errorf("read %s/environ: %w", dir, err)
	}
	env := parseEnviron(b)
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	root := filepath.Join(dir, "root")
	d.Environ = list
	d.PID1Environ = filepath.Join(dir, "environ")
	d.Root = root
	if d.ResolvConf == "" || d.ResolvConf == DefaultResolvConf {
		d.ResolvConf = filepath.Join(root, DefaultResolvConf)
	}
	d.LookPath = rootedLookPath(root, env["PATH"])
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		d.appExe = strings.TrimSuffix(exe, " (deleted)")
	}
	return d, nil
}

// rootedLookPath finds an executable on PATH (as the process sees it)
// inside root. Symbolic links count without being followed: an absolute
// link in the application's image would be resolved against ours.
func rootedLookPath(root, pathVar string) func(string) (string, error) {
	if pathVar == "" {
		pathVar = defaultPATH
	}
	dirs := filepath.SplitList(pathVar)
	return func(file string) (string, error) {
		for _, dir := range dirs {
			if !filepath.IsAbs(dir) {
				continue
			}
			p := filepath.Join(dir, file)
			fi, err := os.Lstat(filepath.Join(root, p))
			if err != nil {
				continue
			}
			if fi.Mode()&fs.ModeSymlink != 0 || (fi.Mode().IsRegular() && fi.Mode()&0o111 != 0) {
				return p, nil
			}
		}
		return "", &fs.PathError{Op: "lookpath", Path: file, Err: fs.ErrNotExist}
	}
}

// appFile is the path of a file the application reads (p as it names it).
func (s *state) appFile(p string) string {
	if s.d.Root == "/" || s.d.Root == "" {
		return p
	}
	return filepath.Join(s.d.Root, p)
}

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture whatever the kernel's own tick rate.
const userHZ = 100

// parseStat returns utime+stime, in clock ticks, from the contents of
// /proc/PID/stat. The command name (field 2) is in parentheses and may hold
// spaces and parentheses itself, so the fields are counted from the last ')'.
func parseStat(b []byte) (int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	// After the name: state (field 3) ... utime (14), stime (15).
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err := strconv.ParseInt(string(f[11]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: utime: %w", err)
	}
	stime, err := strconv.ParseInt(string(f[12]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: stime: %w", err)
	}
	return utime + stime, nil
}

// cpuTime is the CPU time process pid has used so far, all its threads,
// user and system (not its children's).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	t, err := parseStat(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/%w", pid, err)
	}
	return time.Duration(t) * time.Second / userHZ, nil
}

// parseRSS returns VmRSS, in KiB, from the contents of /proc/PID/status.
func parseRSS(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("status: VmRSS: %q, want \"N kB\"", bytes.TrimSpace(rest))
		}
		return strconv.ParseInt(string(f[0]), 10, 64)
	}
	return 0, errors.New("status: no VmRSS line (a kernel thread, or a process that has exited)")
}

// rssKiB is the resident set size of process pid.
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	v, err := parseRSS(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/%w", pid, err)
	}
	return v, nil
}

// raiseFileLimit lifts this process's soft limit on open files to the hard
// limit (the proxies it starts inherit it) and returns the limit in force.
func raiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return l.Cur, nil
}

// cpuTimeTree is cpuTime of pid and of all its descendants (a proxy's
// helper processes: Squid's certificate generator), read from the
// children lists of /proc/PID/task/TID/children.
func cpuTimeTree(pid int) (time.Duration, error) {
	total, err := cpuTime(pid)
	if err != nil {
		return 0, err
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, f := range bytes.Fields(b) {
			child, err := strconv.Atoi(string(f))
			if err != nil {
				continue
			}
			if c, err := cpuTimeTree(child); err == nil {
				total += c
			}
		}
	}
	return total, nil
}

package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"egret.io/egret/internal/noproxy"
)

// relevantVar reports whether a variable changes how clients use proxies:
// every *_proxy in either case and the runtime switches that read them.
func relevantVar(name string) bool {
	l := strings.ToLower(name)
	if strings.HasSuffix(l, "_proxy") || strings.HasPrefix(l, "global_agent_") {
		return true
	}
	switch name {
	case "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS", "NODE_USE_ENV_PROXY", "NODE_OPTIONS",
		"NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE":
		return true
	}
	return false
}

// parseEnviron reads a NUL-separated environment (/proc/PID/environ).
func parseEnviron(b []byte) noproxy.Env {
	var list []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if len(kv) > 0 {
			list = append(list, string(kv))
		}
	}
	return envFromList(list)
}

// pid1Command reads PID 1's command line beside its environ file.
func pid1Command(environPath string) string {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(environPath), "cmdline"))
	if err != nil || len(b) == 0 {
		return ""
	}
	args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
	for i, a := range args {
		// The report is meant to be pasted into tickets: no password from
		// a proxy URL or a -D...password= argument.
		args[i] = passwordProp.ReplaceAllString(redactArg(a), "${1}xxxxx")
	}
	s := strings.TrimSpace(strings.Join(args, " "))
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

// redactArg hides the password of a URL in a command-line argument, alone
// (http://u:p@gw:3128) or as a flag's value (--proxy=http://u:p@gw:3128).
func redactArg(a string) string {
	if !strings.Contains(a, "@") {
		return a
	}
	if i := strings.IndexByte(a, '='); i > 0 && strings.HasPrefix(a, "-") {
		return a[:i+1] + redact(a[i+1:])
	}
	return redact(a)
}

// pid1Check compares the shell's proxy variables with PID 1's.
func (s *state) pid1Check() Check {
	path := s.d.PID1Environ
	return Check{Name: "pid1-env", Target: path, Run: func(context.Context) Result {
		b, err := os.ReadFile(path)
		if err != nil {
			r := Result{Status: Warn}
			switch {
			case errors.Is(err, fs.ErrNotExist):
				r.Summary = fmt.Sprintf("%s does not exist: PID 1's environment is not compared", path)
				r.Advice = "Run the doctor inside the application's container (kubectl exec) on Linux, where /proc is mounted."
			case errors.Is(err, fs.ErrPermission):
				r.Summary = fmt.Sprintf("cannot read %s (permission denied): PID 1 runs as another user", path)
				r.Advice = "Run the doctor as the application's user (kubectl exec uses the container's user), or compare by hand: tr '\\0' '\\n' < /proc/1/environ | grep -i proxy."
			default:
				r.Summary = fmt.Sprintf("cannot read %s: %v", path, err)
			}
			return r
		}
		pid1 := parseEnviron(b)
		var r Result
		if cmd := pid1Command(path); cmd != "" {
			r.Details = append(r.Details, "PID 1: "+cmd)
			if s.o.AppPID != 0 {
				r.Details[0] = fmt.Sprintf("PID %d: %s", s.o.AppPID, cmd)
			}
		}
		if s.o.AppPID != 0 {
			n := 0
			for k := range pid1 {
				if relevantVar(k) {
					n++
				}
			}
			r.Status = Pass
			r.Summary = fmt.Sprintf("the checks use PID %d's own environment (--app-pid: %d proxy-related variables) and its runtimes", s.o.AppPID, n)
			if s.d.appExe != "" {
				r.Details = append(r.Details, "executable: "+s.d.appExe)
			}
			r.Details = append(r.Details, "runtimes: "+s.clientsWhy)
			return r
		}
		names := map[string]bool{}
		for n := range s.env {
			if relevantVar(n) {
				names[n] = true
			}
		}
		for n := range pid1 {
			if relevantVar(n) {
				names[n] = true
			}
		}
		var diffs []string
		for _, n := range sortedKeys(names) {
			sv, sset := s.env[n]
			pv, pset := pid1[n]
			switch {
			case sset && !pset:
				diffs = append(diffs, n+" is set in this shell but not for PID 1")
				r.Details = append(r.Details, fmt.Sprintf("%s: shell %s, PID 1 (unset)", n, showValue(s.env, n)))
			case !sset && pset:
				diffs = append(diffs, n+" is set for PID 1 but not in this shell")
				r.Details = append(r.Details, fmt.Sprintf("%s: shell (unset), PID 1 %s", n, showValue(pid1, n)))
			case sv != pv:
				diffs = append(diffs, n+" differs")
				r.Details = append(r.Details, fmt.Sprintf("%s: shell %s, PID 1 %s", n, showValue(s.env, n), showValue(pid1, n)))
			}
		}
		if len(diffs) == 0 {
			r.Status = Pass
			r.Summary = fmt.Sprintf("PID 1 runs with the same proxy variables as this shell (%d compared)", len(names))
			return r
		}
		r.Status = Fail
		r.Summary = "PID 1 (the application) runs with other proxy variables than this shell: " + strings.Join(diffs, "; ")
		r.Advice = "The application behaves per PID 1's environment, and the other checks use this shell's. Set the variables in the pod spec " +
			"(env/envFrom, both cases) instead of exporting them in a shell or an entrypoint script, and restart the pod; " +
			"or rerun the doctor with PID 1's environment."
		return r
	}}
}

package doctor

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// resolvConf is what the doctor reads from resolv.conf.
type resolvConf struct {
	nameservers []string
	search      []string // lower case, no trailing dot
	ndots       int
}

// defaultNdots is resolv.conf's default (Kubernetes writes ndots:5).
const defaultNdots = 1

// parseResolvConf reads resolv.conf text: nameserver, search (the last
// search or domain line wins, as in glibc) and options ndots:N. Unknown
// lines are ignored; it never fails.
func parseResolvConf(text string) resolvConf {
	rc := resolvConf{ndots: defaultNdots}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) > 1 {
				rc.nameservers = append(rc.nameservers, f[1])
			}
		case "search", "domain":
			rc.search = nil
			for _, d := range f[1:] {
				d = strings.ToLower(strings.TrimSuffix(d, "."))
				if d != "" && len(rc.search) < 32 {
					rc.search = append(rc.search, d)
				}
			}
		case "options":
			for _, o := range f[1:] {
				if v, ok := strings.CutPrefix(o, "ndots:"); ok {
					if n, err := strconv.Atoi(v); err == nil && n >= 0 {
						rc.ndots = min(n, 15) // glibc caps it at 15
					}
				}
			}
		}
	}
	return rc
}

// readResolvConf reads and parses the file at path.
func readResolvConf(path string) (resolvConf, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return resolvConf{ndots: defaultNdots}, fmt.Errorf("read %s: %w", path, err)
	}
	return parseResolvConf(string(b)), nil
}

// clusterDomain finds the cluster domain in a pod's search list
// ("<ns>.svc.<domain> svc.<domain> <domain>"): the part after "svc.".
func (rc resolvConf) clusterDomain() string {
	for _, d := range rc.search {
		if rest, ok := strings.CutPrefix(d, "svc."); ok && rest != "" {
			return rest
		}
	}
	return ""
}

// namespace finds the pod's namespace in its search list, "" if unknown.
func (rc resolvConf) namespace() string {
	dom := rc.clusterDomain()
	if dom == "" {
		return ""
	}
	for _, d := range rc.search {
		if ns, ok := strings.CutSuffix(d, ".svc."+dom); ok && ns != "" && !strings.Contains(ns, ".") {
			return ns
		}
	}
	return ""
}

// candidates returns the absolute names a resolver tries for name, in
// order: the search list first when name has fewer than ndots dots, else
// the name itself first. A name with a trailing dot is only itself.
func (rc resolvConf) candidates(name string) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	var searched []string
	for _, d := range rc.search {
		searched = append(searched, name+"."+d+".")
	}
	if strings.Count(name, ".") >= rc.ndots {
		return append([]string{name + "."}, searched...)
	}
	return append(searched, name+".")
}

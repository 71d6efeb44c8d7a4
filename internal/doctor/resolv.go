package doctor

import (
	"fmt"
	"os"
	"strings"

	"egret.io/egret/internal/resolve"
)

// resolvConf is what the doctor reads from resolv.conf: resolve's
// reading of it (the one parser), and what a pod's search list says.
type resolvConf struct{ resolve.ResolvConf }

// readResolvConf reads and parses the file at path.
func readResolvConf(path string) (resolvConf, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return resolvConf{resolve.ParseResolvConf("")}, fmt.Errorf("read %s: %w", path, err)
	}
	return resolvConf{resolve.ParseResolvConf(string(b))}, nil
}

// nameservers are the servers as text.
func (rc resolvConf) nameservers() []string {
	out := make([]string, len(rc.Nameservers))
	for i, a := range rc.Nameservers {
		out[i] = a.String()
	}
	return out
}

// clusterDomain finds the cluster domain in a pod's search list
// ("<ns>.svc.<domain> svc.<domain> <domain>"): the part after "svc.".
func (rc resolvConf) clusterDomain() string {
	for _, d := range rc.Search {
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
	for _, d := range rc.Search {
		if ns, ok := strings.CutSuffix(d, ".svc."+dom); ok && ns != "" && !strings.Contains(ns, ".") {
			return ns
		}
	}
	return ""
}

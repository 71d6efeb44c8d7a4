package resolve

import (
	"bufio"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// ResolvConf is what resolv.conf(5) says, read the way glibc reads it:
// egret's one reader of the file (its resolver and egret doctor use it).
type ResolvConf struct {
	// Nameservers are the first three valid nameserver addresses (glibc's
	// MAXNS), in order.
	Nameservers []netip.Addr
	// Search is the search list of the last search or domain line, lower
	// case, without dots at either end (at most 32 domains).
	Search []string
	// Ndots (default 1, at most 15), Timeout (default 5 s, 1-30 s) and
	// Attempts (default 2, 1-5) are the options of the same names.
	Ndots    int
	Timeout  time.Duration
	Attempts int
}

// ParseResolvConf reads resolv.conf text. Unknown lines and options are
// ignored, as comments after '#' or ';' are; it never fails.
func ParseResolvConf(text string) ResolvConf {
	rc := ResolvConf{Ndots: 1, Timeout: 5 * time.Second, Attempts: 2}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if a, err := netip.ParseAddr(f[1]); err == nil && len(rc.Nameservers) < 3 {
				rc.Nameservers = append(rc.Nameservers, a)
			}
		case "search", "domain":
			rc.Search = nil
			for _, d := range f[1:] {
				if d = strings.ToLower(strings.Trim(d, ".")); d != "" && len(rc.Search) < 32 {
					rc.Search = append(rc.Search, d)
				}
			}
		case "options":
			for _, o := range f[1:] {
				k, v, _ := strings.Cut(o, ":")
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					continue
				}
				switch k {
				case "ndots":
					rc.Ndots = min(n, 15)
				case "timeout":
					rc.Timeout = time.Duration(max(1, min(n, 30))) * time.Second
				case "attempts":
					rc.Attempts = max(1, min(n, 5))
				}
			}
		}
	}
	return rc
}

// Names returns the absolute names a resolver tries for host, in order:
// the name itself first when it has at least Ndots dots, else the search
// list first. A name with a trailing dot is only itself.
func (rc ResolvConf) Names(host string) []string {
	if strings.HasSuffix(host, ".") {
		return []string{host}
	}
	abs := host + "."
	if len(rc.Search) == 0 {
		return []string{abs}
	}
	out := make([]string, 0, len(rc.Search)+1)
	dotsFirst := strings.Count(host, ".") >= rc.Ndots
	if dotsFirst {
		out = append(out, abs)
	}
	for _, s := range rc.Search {
		out = append(out, host+"."+s+".")
	}
	if !dotsFirst {
		out = append(out, abs)
	}
	return out
}

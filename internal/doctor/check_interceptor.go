package doctor

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// listener is a listening TCP socket of the pod's network namespace, from
// PROC/net/tcp and tcp6 (readable without privileges; the namespace is the
// pod's, whichever container the doctor runs in).
type listener struct {
	addr netip.AddrPort
	uid  int
}

// readListeners parses PROC/net/tcp and tcp6 for sockets in LISTEN state.
func readListeners(proc string) ([]listener, error) {
	var out []listener
	var firstErr error
	for _, f := range []string{"tcp", "tcp6"} {
		fh, err := os.Open(filepath.Join(proc, "net", f))
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st tx:rx tr:tm retrnsmt uid ...
			if len(fields) < 8 || fields[3] != "0A" {
				continue
			}
			ap, ok := parseProcAddr(fields[1])
			if !ok {
				continue
			}
			uid, _ := strconv.Atoi(fields[7])
			out = append(out, listener{addr: ap, uid: uid})
		}
		fh.Close()
	}
	if len(out) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// parseProcAddr reads "0100007F:3A98" (IPv4) or the 32-hex-digit IPv6
// form, each 32-bit word in host (little-endian) order.
func parseProcAddr(s string) (netip.AddrPort, bool) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a.Unmap(), uint16(port)), true
}

// meshSignature is how a mesh proxy shows in a pod.
type meshSignature struct {
	name       string
	ports      map[uint16]string // listening port -> its role
	uid        int               // the proxy's usual UID
	containers []string          // its container names
	annotation string            // an annotation its injector sets
}

var meshes = []meshSignature{
	{name: "Istio (envoy)", ports: map[uint16]string{15001: "outbound capture", 15006: "inbound capture", 15021: "health", 15090: "metrics"},
		uid: 1337, containers: []string{"istio-proxy"}, annotation: "sidecar.istio.io/status"},
	{name: "Linkerd (linkerd2-proxy)", ports: map[uint16]string{4140: "outbound capture", 4143: "inbound capture", 4191: "admin"},
		uid: 2102, containers: []string{"linkerd-proxy"}, annotation: "linkerd.io/proxy-version"},
}

// interceptorCheck reports a second interceptor in the pod: a mesh proxy
// (Istio's envoy, Linkerd's proxy) found by its listening ports and their
// owner's UID in the pod's network namespace, and by its container or the
// injector's annotation in the pod's object. Two transparent proxies in one
// pod capture each other's traffic or none of it, by the order of their
// iptables chains and the UIDs they exempt (docs/mesh.md).
func (s *state) interceptorCheck() Check {
	return Check{Name: "interceptors", Run: func(ctx context.Context) Result {
		ls, err := readListeners(s.d.Proc)
		pod := s.pod(ctx)
		var r Result
		if err != nil {
			r.Details = append(r.Details, "listening sockets not read: "+err.Error())
		}
		var found []string
		var advice []string
		for _, m := range meshes {
			var ev []string
			uids := map[int]bool{}
			for _, l := range ls {
				if role, ok := m.ports[l.addr.Port()]; ok {
					ev = append(ev, fmt.Sprintf("%s (%s, uid %d)", l.addr, role, l.uid))
					uids[l.uid] = true
				}
			}
			for _, c := range pod.Containers {
				for _, n := range m.containers {
					if c.Name == n {
						ev = append(ev, "container "+c.Name+" ("+c.Image+")")
					}
				}
			}
			if v, ok := pod.allAnnotations[m.annotation]; ok {
				ev = append(ev, "annotation "+m.annotation+"="+trimTo(v, 60))
			}
			if len(ev) < 2 && !(len(ev) == 1 && strings.HasPrefix(ev[0], "container ")) {
				// One port alone is not a mesh (another program may use it).
				continue
			}
			sort.Strings(ev)
			found = append(found, m.name)
			r.Details = append(r.Details, m.name+": "+strings.Join(ev, "; "))
			u := m.uid
			for k := range uids {
				u = k
			}
			advice = append(advice, fmt.Sprintf("%s exempts its own UID %d from its capture; egret's transparent sidecar must run as another UID and exempt %d (and the mesh must exempt egret's), or run egret in environment-variable mode beside the mesh", m.name, u, u))
		}
		egretT := false
		for _, l := range ls {
			if l.addr.Port() == 15001 && l.uid != 1337 {
				egretT = true
			}
		}
		for _, c := range pod.Containers {
			if strings.Contains(c.Image, "egret") && c.Kind != "ephemeral" {
				r.Details = append(r.Details, "egret container "+c.Name+" ("+c.Image+")")
			}
		}
		switch {
		case len(found) == 0:
			r.Status = Pass
			r.Summary = "no mesh proxy in this pod: no Istio or Linkerd listeners, containers or annotations"
			if len(ls) > 0 {
				r.Details = append(r.Details, fmt.Sprintf("%d listening sockets in the pod's network namespace", len(ls)))
			}
		case len(found) > 1:
			r.Status = Fail
			r.Summary = "more than one mesh proxy in this pod: " + joinAnd(found)
			r.Advice = strings.Join(advice, " ")
		case s.anyProxySet() && !egretT:
			r.Status = Pass
			r.Summary = found[0] + " intercepts this pod's traffic, and the proxy variables send outside traffic to the proxy through it (egret beside a mesh, environment mode)"
			r.Advice = ""
			r.Details = append(r.Details, "shape: the mesh carries the connection to the proxy; the mesh's egress policy must allow the proxy's address and port (docs/mesh.md)")
		default:
			r.Status = Warn
			r.Summary = "a second interceptor: " + found[0] + " captures this pod's outbound TCP; which proxy sees the traffic depends on the order of the iptables chains and the UIDs each exempts"
			r.Advice = strings.Join(advice, " ") + " See docs/mesh.md for the three supported shapes."
		}
		return r
	}}
}

func trimTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

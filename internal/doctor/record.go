package doctor

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"egret.io/egret/internal/version"
)

// InjectedStateAnnotation is the pod annotation in which egret's webhook
// records what it injected, one hash per part (NO_PROXY set, CA bundle,
// upstream Secret version, sidecar image) as a JSON object; the run record
// copies it as config_hashes. Every other egret.io/ annotation is recorded
// as it is.
const InjectedStateAnnotation = "egret.io/injected-state"

// Record is where and how a doctor run happened: what a ticket needs to
// tell this run from the next (the pod, its node and images, egret's
// version, the injected configuration's hashes) and what the network
// answered (DNS answers, the status codes, the egress IPs). Every field is
// always present in JSON; an unknown value is "" or empty.
type Record struct {
	Time         time.Time   `json:"time"`
	EgretVersion string      `json:"egret_version"`
	Pod          PodRecord   `json:"pod"`
	App          AppRecord   `json:"app"`
	Proxies      []string    `json:"proxies"` // the proxies the variables name, redacted
	DNS          []DNSAnswer `json:"dns"`
	Exchanges    []Exchange  `json:"exchanges"`
	EgressIPs    EgressIPs   `json:"egress_ips"`
	// Paths is the verdict per path of the runbook ("service-direct",
	// "intranet-direct", "outside-via-proxy", "forbidden-blocked"): the
	// worst status of its checks, or "not-checked".
	Paths map[string]string `json:"paths"`
}

// PodRecord is the pod the doctor ran in, from the downward API
// (environment variables, a volume) and, when the service account may, the
// pod's own object in the API server.
type PodRecord struct {
	Name         string            `json:"name"`
	Namespace    string            `json:"namespace"`
	UID          string            `json:"uid"`
	Node         string            `json:"node"`
	PodIPs       []string          `json:"pod_ips"`
	Containers   []ContainerImage  `json:"containers"`
	Annotations  map[string]string `json:"annotations"`   // the egret.io/ ones
	ConfigHashes map[string]string `json:"config_hashes"` // from InjectedStateAnnotation
	// Sources says where the facts came from, and why a source gave none.
	Sources []string `json:"sources"`
}

// ContainerImage is one container of the pod and the image it runs.
type ContainerImage struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // "init", "container", "ephemeral"
	Image   string `json:"image"`
	ImageID string `json:"image_id"` // the digest the node pulled, when known
}

// AppRecord is the process whose environment the checks used.
type AppRecord struct {
	PID        int    `json:"pid"` // 0: this shell's environment
	Command    string `json:"command"`
	Executable string `json:"executable"`
	Runtimes   string `json:"runtimes"`
}

// DNSAnswer is one name as the doctor resolved it (search list applied).
type DNSAnswer struct {
	Name  string   `json:"name"`
	FQDN  string   `json:"fqdn"`
	Addrs []string `json:"addrs"`
	Error string   `json:"error"`
}

// Exchange is one request the checks made: where to, which way, and what
// came back.
type Exchange struct {
	Check    string `json:"check"`
	Target   string `json:"target"`
	Way      string `json:"way"`    // "direct" or "proxy"
	Family   string `json:"family"` // "4", "6" or "" (the resolver's choice)
	Proxy    string `json:"proxy"`  // redacted, "" for direct
	Status   int    `json:"status"` // the HTTP status, 0 when none came
	Error    string `json:"error"`  // what failed, "" when an answer came
	EgressIP string `json:"egress_ip"`
}

// EgressIPs are the addresses the echo servers saw.
type EgressIPs struct {
	Direct []string `json:"direct"`
	Proxy  []string `json:"proxy"`
}

// recorder collects the exchanges of the checks running in parallel.
type recorder struct {
	mu sync.Mutex
	ex []Exchange
}

func (r *recorder) add(e Exchange) {
	r.mu.Lock()
	r.ex = append(r.ex, e)
	r.mu.Unlock()
}

// The runbook's four paths.
const (
	PathServiceDirect   = "service-direct"
	PathIntranetDirect  = "intranet-direct"
	PathOutsideViaProxy = "outside-via-proxy"
	PathForbidden       = "forbidden-blocked"
)

// pathOf is the path a check proves.
func (s *state) pathOf(c Check) string {
	switch c.Name {
	case "direct", "runtimes":
		for _, t := range s.internal {
			if t.raw == c.Target || strings.HasPrefix(c.Target, t.raw+" ") {
				if t.intranet {
					return PathIntranetDirect
				}
				return PathServiceDirect
			}
		}
		if c.Name == "runtimes" {
			return PathOutsideViaProxy
		}
	case "proxy", "egress-ip", "tls":
		return PathOutsideViaProxy
	case "forbidden":
		return PathForbidden
	}
	return ""
}

// record gathers the run record from what the checks saw.
func (s *state) record(pod podFacts, outs []Outcome) Record {
	r := Record{
		Time:         s.d.Now().UTC().Truncate(time.Second),
		EgretVersion: version.Get().Version,
		Pod:          pod.PodRecord,
		App:          AppRecord{PID: s.o.AppPID, Executable: s.d.appExe, Runtimes: s.clientsWhy},
		Proxies:      []string{},
		DNS:          []DNSAnswer{},
		Paths:        map[string]string{},
		EgressIPs:    EgressIPs{Direct: []string{}, Proxy: []string{}},
	}
	if s.o.AppPID != 0 {
		r.App.Command = pid1Command(s.d.PID1Environ)
	}
	seen := map[string]bool{}
	for _, scheme := range []string{"http", "https"} {
		for _, p := range s.proxies(scheme) {
			if n := p.name(); !seen[n] {
				seen[n] = true
				r.Proxies = append(r.Proxies, n)
			}
		}
	}
	s.lk.mu.Lock()
	for _, name := range sortedKeys(s.lk.m) {
		e := s.lk.m[name]
		a := DNSAnswer{Name: name, Addrs: []string{}}
		// A check cut off by its deadline may leave a lookup running.
		if !e.finished.Load() {
			a.Error = "unfinished"
			r.DNS = append(r.DNS, a)
			continue
		}
		a.FQDN = e.res.fqdn()
		for _, ad := range e.res.addrs {
			a.Addrs = append(a.Addrs, ad.String())
		}
		if e.res.err != nil {
			a.Error = failureOf("resolve "+name, e.res.err).what()
		}
		r.DNS = append(r.DNS, a)
	}
	s.lk.mu.Unlock()
	s.rec.mu.Lock()
	r.Exchanges = append([]Exchange{}, s.rec.ex...)
	s.rec.mu.Unlock()
	sort.SliceStable(r.Exchanges, func(i, j int) bool {
		a, b := r.Exchanges[i], r.Exchanges[j]
		if a.Check != b.Check {
			return a.Check < b.Check
		}
		if a.Target != b.Target {
			return a.Target < b.Target
		}
		if a.Way != b.Way {
			return a.Way < b.Way
		}
		return a.Family < b.Family
	})
	ips := map[string]map[string]bool{"direct": {}, "proxy": {}}
	for _, e := range r.Exchanges {
		if e.Check == "egress-ip" && e.EgressIP != "" {
			ips[e.Way][e.EgressIP] = true
		}
	}
	r.EgressIPs.Direct = append(r.EgressIPs.Direct, sortedKeys(ips["direct"])...)
	r.EgressIPs.Proxy = append(r.EgressIPs.Proxy, sortedKeys(ips["proxy"])...)
	for _, p := range []string{PathServiceDirect, PathIntranetDirect, PathOutsideViaProxy, PathForbidden} {
		r.Paths[p] = "not-checked"
	}
	worst := map[string]Status{}
	for _, o := range outs {
		if o.Path != "" && o.Status > worst[o.Path] {
			worst[o.Path] = o.Status
		}
	}
	for p, st := range worst {
		r.Paths[p] = st.String()
	}
	return r
}

// podFacts is what podFacts found out about the pod.
type podFacts struct {
	PodRecord
	allAnnotations map[string]string // every annotation seen, for the interceptor check
}

// pod gathers the pod's facts once per run.
func (s *state) pod(ctx context.Context) podFacts {
	s.podOnce.Do(func() { s.podF = s.podFacts(ctx) })
	return s.podF
}

// Environment variables pods commonly get from the downward API.
var (
	podNameVars      = []string{"POD_NAME", "MY_POD_NAME", "K8S_POD_NAME"}
	podNamespaceVars = []string{"POD_NAMESPACE", "MY_POD_NAMESPACE", "K8S_NAMESPACE"}
	nodeNameVars     = []string{"NODE_NAME", "MY_NODE_NAME", "K8S_NODE_NAME", "KUBERNETES_NODE_NAME"}
)

func (s *state) firstVar(names []string) (string, string) {
	for _, n := range names {
		if v := strings.TrimSpace(s.env[n]); v != "" {
			return v, n
		}
	}
	return "", ""
}

// podFacts finds the pod: the downward API's variables and volume, the
// service account's namespace, the host name, and the pod's object from
// the API server when its service account may read it.
func (s *state) podFacts(ctx context.Context) podFacts {
	p := PodRecord{PodIPs: []string{}, Containers: []ContainerImage{}, Annotations: map[string]string{},
		ConfigHashes: map[string]string{}, Sources: []string{}}
	var from []string
	if v, n := s.firstVar(podNameVars); v != "" {
		p.Name = v
		from = append(from, n)
	}
	if v, n := s.firstVar(podNamespaceVars); v != "" {
		p.Namespace = v
		from = append(from, n)
	}
	if v, n := s.firstVar(nodeNameVars); v != "" {
		p.Node = v
		from = append(from, n)
	}
	if len(from) > 0 {
		p.Sources = append(p.Sources, "environment: "+strings.Join(from, ", "))
	}
	if p.Namespace == "" {
		if b, err := os.ReadFile(filepath.Join(s.d.ServiceAccount, "namespace")); err == nil {
			p.Namespace = strings.TrimSpace(string(b))
			p.Sources = append(p.Sources, "namespace: the service account's")
		}
	}
	if p.Name == "" {
		if h := s.env["HOSTNAME"]; h != "" && s.o.AppPID != 0 {
			p.Name = h
		} else if h, err := s.d.Hostname(); err == nil {
			p.Name = h
		}
		if p.Name != "" {
			p.Sources = append(p.Sources, "name: the host name (a pod's, unless spec.hostname is set)")
		}
	}
	all := map[string]string{}
	if ann, err := readDownwardFile(filepath.Join(s.d.PodInfo, "annotations")); err == nil {
		p.Sources = append(p.Sources, "downward API volume "+s.d.PodInfo)
		p.addAnnotations(ann)
		for k, v := range ann {
			all[k] = v
		}
	}
	if obj, err := s.ownPod(ctx, p.Namespace, p.Name); err != nil {
		p.Sources = append(p.Sources, "api-server: "+err.Error())
	} else {
		p.Sources = append(p.Sources, "api-server: the pod's own object")
		p.fromObject(obj)
		for k, v := range obj.Metadata.Annotations {
			all[k] = v
		}
	}
	return podFacts{PodRecord: p, allAnnotations: all}
}

// addAnnotations keeps the egret.io/ annotations and reads the injected
// state's hashes.
func (p *PodRecord) addAnnotations(ann map[string]string) {
	for k, v := range ann {
		if !strings.HasPrefix(k, "egret.io/") {
			continue
		}
		p.Annotations[k] = v
		if k == InjectedStateAnnotation {
			var m map[string]any
			if json.Unmarshal([]byte(v), &m) == nil {
				for part, h := range m {
					p.ConfigHashes[part] = fmt.Sprint(h)
				}
			}
		}
	}
}

// readDownwardFile reads a downward-API file: one key="value" a line, the
// value quoted as Go quotes strings.
func readDownwardFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		out[k] = v
	}
	return out, sc.Err()
}

// podObject is the part of a Pod the record reads.
type podObject struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		NodeName            string `json:"nodeName"`
		InitContainers      []struct{ Name, Image string }
		Containers          []struct{ Name, Image string }
		EphemeralContainers []struct{ Name, Image string }
	} `json:"spec"`
	Status struct {
		PodIPs                     []struct{ IP string }
		InitContainerStatuses      []containerStatus
		ContainerStatuses          []containerStatus
		EphemeralContainerStatuses []containerStatus
	} `json:"status"`
}

type containerStatus struct {
	Name, Image string
	ImageID     string `json:"imageID"`
}

// fromObject fills the record from the pod's object.
func (p *PodRecord) fromObject(o *podObject) {
	p.Name, p.Namespace, p.UID = o.Metadata.Name, o.Metadata.Namespace, o.Metadata.UID
	if o.Spec.NodeName != "" {
		p.Node = o.Spec.NodeName
	}
	p.PodIPs = p.PodIPs[:0]
	for _, ip := range o.Status.PodIPs {
		p.PodIPs = append(p.PodIPs, ip.IP)
	}
	ids := map[string]string{}
	for _, st := range [][]containerStatus{o.Status.InitContainerStatuses, o.Status.ContainerStatuses, o.Status.EphemeralContainerStatuses} {
		for _, c := range st {
			ids[c.Name] = c.ImageID
		}
	}
	p.Containers = p.Containers[:0]
	for _, g := range []struct {
		kind string
		cs   []struct{ Name, Image string }
	}{{"init", o.Spec.InitContainers}, {"container", o.Spec.Containers}, {"ephemeral", o.Spec.EphemeralContainers}} {
		for _, c := range g.cs {
			p.Containers = append(p.Containers, ContainerImage{Name: c.Name, Kind: g.kind, Image: c.Image, ImageID: ids[c.Name]})
		}
	}
	p.addAnnotations(o.Metadata.Annotations)
}

// maxPodObject bounds the pod object read from the API server.
const maxPodObject = 4 << 20

// ownPod reads the pod's own object from the API server with the pod's
// service-account token, directly (never through a proxy), verifying the
// server with the service account's ca.crt. The token never leaves the
// Authorization header.
func (s *state) ownPod(ctx context.Context, ns, name string) (*podObject, error) {
	host, port := s.env["KUBERNETES_SERVICE_HOST"], s.env["KUBERNETES_SERVICE_PORT"]
	switch {
	case host == "":
		return nil, errors.New("not read: KUBERNETES_SERVICE_HOST is not set")
	case ns == "" || name == "":
		return nil, errors.New("not read: the pod's name or namespace is unknown")
	}
	if port == "" {
		port = "443"
	}
	token, err := os.ReadFile(filepath.Join(s.d.ServiceAccount, "token"))
	if err != nil {
		return nil, errors.New("not read: no service-account token (automountServiceAccountToken: false?)")
	}
	caPEM, err := os.ReadFile(filepath.Join(s.d.ServiceAccount, "ca.crt"))
	if err != nil {
		return nil, errors.New("not read: no ca.crt beside the service-account token")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("not read: ca.crt holds no certificate")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*s.opTimeout())
	defer cancel()
	tr := &http.Transport{
		Proxy: nil, // the API server is reached directly
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			h, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			pn, _ := strconv.ParseUint(p, 10, 16)
			c, _, f := s.dialHost(ctx, h, uint16(pn))
			if f != nil {
				return nil, errors.New(f.Error())
			}
			return c, nil
		},
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: s.opTimeout(),
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	u := "https://" + net.JoinHostPort(host, port) + "/api/v1/namespaces/" + ns + "/pods/" + name
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("not read: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "egret-doctor")
	resp, err := hc.Do(req)
	if err != nil {
		var f *failure
		if errors.As(err, &f) {
			return nil, fmt.Errorf("not read: %s", f.Error())
		}
		return nil, fmt.Errorf("not read: %s", shortErr(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxPodObject))
	switch {
	case resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("403: the service account may not get pods/%s (grant get on its own pod, or mount the downward API)", name)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s for pods/%s", resp.Status, name)
	}
	var o podObject
	if err := json.Unmarshal(body, &o); err != nil {
		return nil, fmt.Errorf("not a pod object: %v", err)
	}
	return &o, nil
}

// addrFamily is "4" or "6".
func addrFamily(a netip.Addr) string {
	if a.Unmap().Is4() {
		return "4"
	}
	return "6"
}

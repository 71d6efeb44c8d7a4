package doctor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// egressSample is one request to an echo server.
type egressSample struct {
	ip      netip.Addr // what the echo server saw
	f       *failure   // direct: the request failed; via: the proxy could not be talked to
	verdict *verdict   // via: the proxy answered (or the tunnel failed) instead of the echo server
	err     error      // the answer is not an egret echo reply
}

// egressRun is one echo endpoint sampled over one address family.
type egressRun struct {
	echo      *url.URL
	fam       string // "4", "6", or "" (the resolver's and the proxy's choice)
	note      string // why the family could not be sampled, "" when it was
	viaURL    *url.URL
	proxy     string // redacted, "" when no proxy serves the scheme
	from      string
	direct    []egressSample
	via       []egressSample
	hasDirect bool
}

func famLabel(fam string) string {
	if fam == "" {
		return ""
	}
	return "IPv" + fam
}

// echoes are the echo endpoints given.
func (s *state) echoes() []*url.URL {
	var out []*url.URL
	for _, u := range []*url.URL{s.echo, s.echo2} {
		if u != nil {
			out = append(out, u)
		}
	}
	return out
}

// egressCheck asks each echo server which address it sees, directly and
// through the proxy, Options.Samples times per address family, and
// compares: the addresses must differ (a separate egress IP), be the ones
// expected (--expect-egress-ip), and not vary between samples or echo
// servers unless expected.
func (s *state) egressCheck() Check {
	var tgts []string
	for _, e := range s.echoes() {
		tgts = append(tgts, e.String())
	}
	return Check{Name: "egress-ip", Target: strings.Join(tgts, ", "), Run: func(ctx context.Context) Result {
		if s.echo == nil {
			return Result{Status: Warn, Summary: "no --echo URL: the egress IP is not checked",
				Advice: "Run `egret echo --listen :8080` outside the cluster and pass --echo http://HOST:8080/."}
		}
		var runs []*egressRun
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, e := range s.echoes() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs := s.egressEndpoint(ctx, e)
				mu.Lock()
				runs = append(runs, rs...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		slices.SortFunc(runs, func(a, b *egressRun) int {
			if a.echo != b.echo {
				if a.echo == s.echo {
					return -1
				}
				return 1
			}
			return strings.Compare(a.fam, b.fam)
		})
		return s.judgeEgress(runs)
	}}
}

// egressEndpoint samples one echo endpoint over each address family it
// has (or the one --family names).
func (s *state) egressEndpoint(ctx context.Context, e *url.URL) []*egressRun {
	res := s.lk.lookup(ctx, e.Hostname())
	present := map[string]bool{}
	for _, a := range res.addrs {
		present[addrFamily(a)] = true
	}
	var fams []string
	switch {
	case s.o.Family != "":
		fams = []string{s.o.Family}
	case present["4"] && present["6"]:
		fams = []string{"4", "6"}
	case present["4"]:
		fams = []string{"4"}
	case present["6"]:
		fams = []string{"6"}
	default:
		fams = []string{""} // the name does not resolve here: the proxy may still
	}
	literal := len(fams) > 1 || s.o.Family != ""
	ps := s.proxies(e.Scheme)
	var runs []*egressRun
	var wg sync.WaitGroup
	for _, fam := range fams {
		r := &egressRun{echo: e, fam: fam, viaURL: e}
		runs = append(runs, r)
		if fam != "" && !present[fam] {
			r.note = fmt.Sprintf("%s has no %s address here", e.Hostname(), famLabel(fam))
			if res.err != nil {
				r.note = fmt.Sprintf("%s does not resolve here (%s)", e.Hostname(), failureOf("", res.err).what())
			}
			continue
		}
		if literal && fam != "" {
			// Each family on its own: the proxy gets the address, not the
			// name it would resolve to a family of its choice.
			a := familyAddrs(res.addrs, fam)[0]
			u := *e
			u.Host = net.JoinHostPort(a.String(), portOf(e))
			r.viaURL = &u
		}
		if len(ps) > 0 && ps[0].url != nil {
			r.proxy, r.from = ps[0].name(), ps[0].source()
		}
		r.hasDirect = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < s.o.Samples && ctx.Err() == nil; i++ {
				r.direct = append(r.direct, s.directSample(ctx, r))
			}
		}()
		if r.proxy != "" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < s.o.Samples && ctx.Err() == nil; i++ {
					r.via = append(r.via, s.viaSample(ctx, r, ps[0]))
				}
			}()
		}
	}
	wg.Wait()
	return runs
}

func (s *state) directSample(ctx context.Context, r *egressRun) egressSample {
	ex := Exchange{Check: "egress-ip", Target: r.echo.String(), Way: "direct", Family: r.fam}
	a, _, f := s.getDirectFam(ctx, r.echo, true, r.fam)
	var smp egressSample
	if f != nil {
		smp.f = f
		ex.Error = f.Error()
	} else {
		ex.Status = a.code
		smp.ip, smp.err = echoIP(a)
		if smp.err != nil {
			ex.Error = smp.err.Error()
		} else {
			ex.EgressIP = smp.ip.String()
		}
	}
	s.rec.add(ex)
	return smp
}

func (s *state) viaSample(ctx context.Context, r *egressRun, p proxyChoice) egressSample {
	ex := Exchange{Check: "egress-ip", Target: r.viaURL.String(), Way: "proxy", Family: r.fam, Proxy: p.name()}
	in := decodeIn{proxy: p.name(), source: p.source(), target: hostPortOf(r.viaURL)}
	if p.url.User != nil {
		in.user = p.url.User.Username()
	}
	a, pa, f, of := s.getViaFam(ctx, p.url, r.viaURL, r.fam)
	var smp egressSample
	switch {
	case f != nil:
		v := decodeProxyFailure(f, in)
		smp.verdict = &v
		ex.Error = f.Error()
	case pa != nil:
		v := decodeAnswer(pa, in)
		smp.verdict = &v
		ex.Status = pa.code
	case of != nil:
		v := verdict{status: Fail, summary: "the proxy opened the tunnel, but " + of.Error(), details: []string{of.Error()}}
		if of.kind == fkTLS {
			v.advice = "The certificate of " + r.echo.Host + " is not trusted here. A proxy that intercepts TLS presents its own certificate: add its CA to the image's trust store (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, the JVM's cacerts)."
		} else {
			v.advice = "The echo server answers the proxy but not as expected; check --echo."
		}
		smp.verdict = &v
		ex.Error = of.Error()
	default:
		ex.Status = a.code
		smp.ip, smp.err = echoIP(a)
		if smp.err != nil {
			ex.Error = smp.err.Error()
		} else {
			ex.EgressIP = smp.ip.String()
		}
	}
	s.rec.add(ex)
	return smp
}

// ipCounts counts the addresses seen in samples, in first-seen order.
func ipCounts(smps []egressSample) ([]netip.Addr, map[netip.Addr]int) {
	var order []netip.Addr
	n := map[netip.Addr]int{}
	for _, x := range smps {
		if x.ip.IsValid() {
			if n[x.ip] == 0 {
				order = append(order, x.ip)
			}
			n[x.ip]++
		}
	}
	return order, n
}

func (s *state) expected(a netip.Addr) bool {
	for _, p := range s.expect {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (s *state) expectList() string {
	out := make([]string, len(s.expect))
	for i, p := range s.expect {
		if p.IsSingleIP() {
			out[i] = p.Addr().String()
		} else {
			out[i] = p.String()
		}
	}
	return strings.Join(out, ", ")
}

// ipList writes "a" or "a (2), b (1)" when there are several.
func ipList(order []netip.Addr, n map[netip.Addr]int) string {
	if len(order) == 1 {
		return order[0].String()
	}
	parts := make([]string, len(order))
	for i, a := range order {
		parts[i] = fmt.Sprintf("%s (%d)", a, n[a])
	}
	return strings.Join(parts, ", ")
}

// judgeEgress turns the runs into one result: the worst run decides, the
// summary names each family (and echo server) when there are several.
func (s *state) judgeEgress(runs []*egressRun) Result {
	var r Result
	var parts []string
	multi := len(runs) > 1
	twoEchoes := s.echo2 != nil
	for _, run := range runs {
		st, summary, details, advice := s.judgeRun(run)
		label := famLabel(run.fam)
		if twoEchoes {
			label = strings.TrimSpace(run.echo.Host + " " + label)
		}
		for _, d := range details {
			if multi && label != "" {
				d = label + ": " + d
			}
			r.Details = append(r.Details, d)
		}
		if multi && label != "" {
			summary = label + ": " + summary
		}
		parts = append(parts, summary)
		if st > r.Status {
			r.Status = st
			r.Advice = advice
		} else if st == r.Status && r.Advice == "" {
			r.Advice = advice
		}
	}
	r.Summary = strings.Join(parts, "; ")
	// Two echo servers, one family: the outside should see the same
	// egress address from both.
	if twoEchoes && r.Status != Fail {
		byFam := map[string][]string{}
		for _, run := range runs {
			order, _ := ipCounts(run.via)
			var ips []string
			for _, a := range order {
				ips = append(ips, a.String())
			}
			slices.Sort(ips)
			if len(ips) > 0 {
				byFam[run.fam] = append(byFam[run.fam], strings.Join(ips, ","))
			}
		}
		for fam, sets := range byFam {
			if len(sets) == 2 && sets[0] != sets[1] && len(s.expect) == 0 {
				r.Status = max(r.Status, Warn)
				r.Summary += fmt.Sprintf("; the two echo servers see different egress addresses%s (%s and %s)", strings.TrimSuffix(" over "+famLabel(fam), " over "), sets[0], sets[1])
				r.Advice = "Traffic through the proxy leaves from different addresses per destination: another route, NAT or upstream for one of them. Allow-list every address, or pin the egress; --expect-egress-ip checks it."
			}
		}
	}
	return r
}

// judgeRun judges one endpoint and family.
func (s *state) judgeRun(run *egressRun) (Status, string, []string, string) {
	if run.note != "" {
		st := Pass
		if s.o.Family != "" {
			st = Warn
		}
		return st, run.note + ": not sampled", []string{run.note}, "Give --echo a URL whose host has an " + famLabel(run.fam) + " address (or an " + famLabel(run.fam) + " literal) to check that family."
	}
	var details []string
	n := len(run.direct)
	dOrder, dCount := ipCounts(run.direct)
	var directF *failure
	var directErr error
	dOK := 0
	for _, x := range run.direct {
		if x.ip.IsValid() {
			dOK++
		}
		if x.f != nil && directF == nil {
			directF = x.f
		}
		if x.err != nil && directErr == nil {
			directErr = x.err
		}
	}
	directBlocked := directF != nil && len(dOrder) == 0 &&
		(directF.kind == fkRefused || directF.kind == fkTimeout || directF.kind == fkUnreachable)
	switch {
	case len(dOrder) > 0:
		details = append(details, fmt.Sprintf("direct: the echo server sees %s%s", ipList(dOrder, dCount), sampleNote(dOK, n)))
	case directF != nil:
		details = append(details, "direct: "+directF.Error())
	case directErr != nil:
		details = append(details, "direct: "+directErr.Error())
	}
	if run.proxy == "" {
		details = append(details, "via proxy: no proxy for "+run.echo.Scheme+":// URLs")
		if len(dOrder) > 0 {
			return Warn, fmt.Sprintf("no proxy configured: the outside sees this pod as %s", ipList(dOrder, dCount)), details,
				"Set the proxy variables (or --proxy) to compare the egress IP through the proxy."
		}
		return Warn, "no proxy configured, and the echo server is not reachable directly", details,
			"Set the proxy variables (or --proxy) to compare the egress IP through the proxy."
	}
	vOrder, vCount := ipCounts(run.via)
	var viaVerdict *verdict
	var viaErr error
	bad := 0
	for _, x := range run.via {
		if x.verdict != nil || x.err != nil {
			bad++
		}
		if x.verdict != nil && viaVerdict == nil {
			viaVerdict = x.verdict
		}
		if x.err != nil && viaErr == nil {
			viaErr = x.err
		}
	}
	via := "via proxy " + run.proxy
	if run.viaURL != run.echo {
		via += " to " + run.viaURL.Host
	}
	switch {
	case viaVerdict != nil:
		details = append(details, via+": "+viaVerdict.summary)
	case viaErr != nil:
		details = append(details, via+": "+viaErr.Error())
	}
	if len(vOrder) > 0 {
		details = append(details, fmt.Sprintf("%s (from %s): the echo server sees %s%s", via, run.from, ipList(vOrder, vCount), sampleNote(len(run.via)-bad, len(run.via))))
	}
	failedSome := ""
	if bad > 0 && len(run.via) > 1 {
		failedSome = fmt.Sprintf(" (%d of %d samples)", bad, len(run.via))
	}
	switch {
	case viaVerdict != nil:
		return Fail, "the echo server cannot be reached through the proxy" + failedSome + ": " + viaVerdict.summary, details, viaVerdict.advice
	case viaErr != nil:
		return Fail, "the answer through the proxy is not an egret echo reply" + failedSome + ": " + viaErr.Error(), details,
			"Check that --echo points at `egret echo`; a proxy that rewrites answers (TLS interception, a captive page) also shows here."
	}
	var unexpected []string
	for _, a := range vOrder {
		if len(s.expect) > 0 && !s.expected(a) {
			unexpected = append(unexpected, a.String())
		}
	}
	if len(unexpected) > 0 {
		return Fail, fmt.Sprintf("egress IP through the proxy %s is not the expected %s", joinAnd(unexpected), s.expectList()), details,
			"The outside (a partner's allow-list) expects " + s.expectList() + ", but this traffic leaves from " + joinAnd(unexpected) +
				": a gateway replica without the egress NAT, another route, or another upstream. Fix the egress path, or the allow-list and --expect-egress-ip."
	}
	viaIPs := ipList(vOrder, vCount) + sampleNote(len(run.via), len(run.via))
	if len(s.expect) > 0 {
		viaIPs += " (expected)"
	}
	for _, a := range dOrder {
		if vCount[a] > 0 {
			return Warn, fmt.Sprintf("the proxy and direct egress both leave from %s: the proxy does not give a separate egress IP", a), details,
				"If partners allow-list the gateway's address, route this traffic through the gateway or the upstream pool (a sidecar with a direct default route, or a proxy on this node, leaves from the pod's or node's address). " +
					"Direct egress is also open: a NetworkPolicy can restrict the pod to DNS, the cluster and the proxy."
		}
	}
	if len(vOrder) > 1 && len(s.expect) == 0 {
		return Warn, fmt.Sprintf("egress through the proxy leaves from %d addresses: %s", len(vOrder), ipList(vOrder, vCount)), details,
			"Partners that allow-list one address will refuse some requests: pin the gateway's egress (one NAT address for every replica) or allow-list each; --expect-egress-ip checks it."
	}
	switch {
	case directBlocked:
		return Pass, fmt.Sprintf("egress IP through the proxy: %s; direct egress is blocked (%s), as a NetworkPolicy should make it", viaIPs, directF.what()), details, ""
	case len(dOrder) == 0:
		return Pass, fmt.Sprintf("egress IP through the proxy: %s; the direct request failed", viaIPs), details, ""
	}
	return Pass, fmt.Sprintf("egress IP through the proxy: %s; direct: %s%s (they differ, as expected)", viaIPs, ipList(dOrder, dCount), sampleNote(dOK, n)), details, ""
}

// sampleNote is "" for one sample, " (3 of 3 samples)" for more.
func sampleNote(ok, n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf(" (%d of %d samples)", ok, n)
}

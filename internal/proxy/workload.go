package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/sniff"
	"egret.io/egret/internal/transport"
)

// Per-workload egress: with Options.Workloads set (package policy, wired
// by the gateway), admit identifies each client — by the service-account
// token its request carries in Proxy-Authorization, else by its address —
// and judges every destination by the client's policy before the
// gateway's own routes, on every listener.

// Workloads tells who a client is and what it may reach.
type Workloads interface {
	// Identify returns the workload of the client at addr; auth is its
	// request's Proxy-Authorization value ("" when none, and always on
	// the transparent and SOCKS5 listeners). An error refuses the client
	// (403): it presented a token that does not hold.
	Identify(ctx context.Context, addr netip.Addr, auth string) (Workload, error)
}

// Workload is a client's identity and policy.
type Workload struct {
	// By is how the client was identified: token, address or unknown.
	By                        string
	Namespace, ServiceAccount string
	Pod                       string
	// Policy names the deciding policy ("" when none): a log field and a
	// (bounded) metric label.
	Policy string
	// Note says why a presented token was not used.
	Note string
	// Rules judge the client's destinations; nil: the gateway's routes
	// alone decide.
	Rules WorkloadRules
}

// WorkloadRules is a workload's compiled policy.
type WorkloadRules interface {
	// Decide judges dest: Deny (refused), Upstream (through the
	// decision's pool) or Direct (allowed; the gateway's routes decide).
	Decide(ctx context.Context, dest route.Dest, res route.Resolver) route.Decision
	// Admit takes a slot of the workload's limits for one request or
	// tunnel; a refusal is a *limit.Error. release may be nil.
	Admit(ctx context.Context) (release func(), err error)
	// SNI says whether a CONNECT tunnel to port has its TLS ClientHello
	// checked against the CONNECT target, and whether a mismatch is
	// refused (else logged as would_deny).
	SNI(port uint16) (check, enforce bool)
}

// Log field names of a workload.
const (
	logIdentity   = "identity" // token, address, unknown
	logNamespace  = "namespace"
	logSA         = "service_account"
	logPod        = "pod"
	logPolicy     = "policy"
	logPolicyRule = "policy_rule" // the policy rule that let the destination through
	logIDNote     = "identity_note"
	logSNI        = "sni" // the ClientHello's server name (CONNECT with the SNI check)
)

// identify finds the workload of ev's client. auth is the request's
// Proxy-Authorization value.
func (s *Server) identify(ctx context.Context, ev *event, auth string) *proxystatus.Error {
	ev.identified = true
	ip, _ := clientIP(ev.client)
	w, err := s.opts.Workloads.Identify(ctx, ip, auth)
	ev.wl = w
	pm := s.policyMetrics()
	if err != nil {
		if pm != nil {
			pm.Identities.WithLabelValues("rejected").Inc()
		}
		s.countPolicy("identity")
		return &proxystatus.Error{Type: proxystatus.HTTPRequestDenied, Detail: "identity: " + proxystatus.Scrub(err.Error())}
	}
	if pm != nil {
		pm.Identities.WithLabelValues(w.By).Inc()
	}
	return nil
}

// judge applies the client's policy to what routing decided for a: a
// policy deny refuses, a policy pool sends the traffic there, and an allow
// leaves the gateway's decision (its own deny rules still refuse).
//
// The policy judges the same answer the routes judged (a.names), and what
// both approved is what may be dialled: a direct decision keeps only the
// addresses both approve (route.Decision.Addrs), and none left is a deny.
func (s *Server) judge(ctx context.Context, ev *event, a *admission) {
	r := ev.wl.Rules
	if r == nil {
		return
	}
	pd := r.Decide(ctx, a.dest, &a.names)
	wd := a.dec.WouldDeny
	switch {
	case pd.Action == route.Deny:
		a.dec = pd
	case a.dec.Action == route.Deny:
	case pd.Action == route.Upstream:
		ev.policyRule = pd.Detail()
		pd.WouldDeny = ""
		a.dec, a.dial = pd, a.dest
	default:
		ev.policyRule = pd.Detail()
		switch a.dec.Action {
		case route.Direct:
			addrs, ok := approved(a.dec.Addrs, pd.Addrs)
			if !ok {
				a.dec = unapproved(pd, "the gateway's route "+a.dec.Detail()+" and the policy approve no address in common")
			} else {
				a.dec.Addrs = addrs
			}
		case route.Upstream:
			// The member is asked for an address the policy approved
			// when it approved the name by its addresses (pinUpstream).
			if pd.Reason == route.ReasonResolved {
				a.policyAddrs, a.policyJudged = pd.Addrs, true
			}
		}
	}
	if a.dec.Action != route.Deny {
		if pd.WouldDeny != "" {
			a.dec.WouldDeny = pd.WouldDeny
		} else {
			a.dec.WouldDeny = wd
		}
	}
	s.countVerdict(ev, a.dec)
}

// approved returns the addresses both x and y approve (each nil when it
// did not judge addresses; both from one answer), in x's order, and false
// when both judged and none is common.
func approved(x, y []netip.Addr) ([]netip.Addr, bool) {
	switch {
	case y == nil:
		return x, true
	case x == nil:
		return y, true
	}
	all := true
	for _, a := range x {
		if !slices.Contains(y, a) {
			all = false
			break
		}
	}
	if all {
		return x, len(x) > 0 // the usual case: y approves all x does
	}
	out := make([]netip.Addr, 0, min(len(x), len(y)))
	for _, a := range x {
		if slices.Contains(y, a) {
			out = append(out, a)
		}
	}
	return out, len(out) > 0
}

// unapproved turns dec, which let a destination through by some of its
// addresses, into the deny of an address it did not approve; why is
// appended to its source.
func unapproved(dec route.Decision, why string) route.Decision {
	return route.Decision{Action: route.Deny, Reason: dec.Reason, Rule: dec.Rule, Entry: dec.Entry, Source: dec.Source + ": " + why}
}

// admitWorkload takes the slot of the workload's limits into l.
func (s *Server) admitWorkload(ctx context.Context, ev *event, l *lease) *proxystatus.Error {
	r := ev.wl.Rules
	if r == nil {
		return nil
	}
	rel, err := r.Admit(ctx)
	if err == nil {
		l.hold(rel)
		return nil
	}
	if pm := s.policyMetrics(); pm != nil {
		pm.Decisions.WithLabelValues(pm.Labels.Value(ev.wl.Policy), "limited").Inc()
	}
	var le *limit.Error
	if !errors.As(err, &le) {
		return proxystatus.From(err)
	}
	s.countLimit(string(le.Kind))
	st := http.StatusServiceUnavailable
	if strings.HasSuffix(string(le.Kind), "_rate") {
		st = http.StatusTooManyRequests
	}
	return &proxystatus.Error{Type: proxystatus.ConnectionLimitReached, Status: st, Err: err,
		Detail: "workload " + le.Key + " is limited to " + le.Limit}
}

func (s *Server) countVerdict(ev *event, dec route.Decision) {
	pm := s.policyMetrics()
	if pm == nil {
		return
	}
	v := "allow"
	switch {
	case dec.Action == route.Deny:
		v = "deny"
	case dec.WouldDeny != "":
		v = "would_deny"
	}
	pm.Decisions.WithLabelValues(pm.Labels.Value(ev.wl.Policy), v).Inc()
}

func (s *Server) policyMetrics() *metrics.Policy {
	if s.m == nil {
		return nil
	}
	return s.m.Policy
}

// logWorkload writes the workload's fields to the access log line.
func logWorkload(l *logLine, ev *event) {
	if !ev.identified {
		return
	}
	w := &ev.wl
	l.str(logIdentity, w.By)
	if w.Namespace != "" {
		l.str(logNamespace, w.Namespace)
	}
	if w.ServiceAccount != "" {
		l.str(logSA, w.ServiceAccount)
	}
	if w.Pod != "" {
		l.str(logPod, w.Pod)
	}
	if w.Policy != "" {
		l.str(logPolicy, w.Policy)
	}
	if ev.policyRule != "" {
		l.str(logPolicyRule, ev.policyRule)
	}
	if w.Note != "" {
		l.str(logIDNote, w.Note)
	}
	if ev.sni != "" {
		l.str(logSNI, ev.sni)
	}
}

// sniTimeout bounds the wait for a tunnel's ClientHello.
const sniTimeout = 3 * time.Second

// checkSNI reads the ClientHello a client sends into its tunnel to a name
// (CONNECT, SOCKS5; c, after early, the bytes already buffered) when its
// policy asks for it, and compares the server name with the tunnel's
// target. It returns the bytes read, to be relayed first, and the refusal
// when the check fails under enforce: the names differ, or the check could
// not finish — the ClientHello did not arrive whole within the 3 s (a
// client that sends nothing at all included), is larger than the 16 KiB
// read, does not parse, or the client closed first. Under a report-only
// check a failure is logged as would_deny. An IP-literal target is not
// compared (a name is not an address); a client that sends something that
// is not TLS, or a ClientHello without a server name, is let through.
func (s *Server) checkSNI(ev *event, a *admission, c net.Conn, early []byte) ([]byte, *proxystatus.Error) {
	r := ev.wl.Rules
	if r == nil {
		return early, nil
	}
	check, enforce := r.SNI(a.dest.Port)
	if !check || a.dest.Addr.IsValid() {
		return early, nil
	}
	res, err := sniff.Sniff(transport.WithPrefix(c, early), sniff.Options{FirstByteTimeout: sniTimeout, Timeout: sniTimeout})
	var detail string
	if why := unfinished(res, err); why != "" {
		detail = "SNI check could not finish: " + why + " (" + ev.wl.Policy + ")"
	} else {
		if res.Proto != sniff.TLS || res.Host == "" {
			return res.Peeked, nil
		}
		ev.sni = res.Host
		name := strings.TrimSuffix(strings.ToLower(res.Host), ".")
		if name == a.dest.Host {
			return res.Peeked, nil
		}
		detail = "TLS server name " + name + " is not the CONNECT target " + a.dest.Host + " (" + ev.wl.Policy + ")"
	}
	return res.Peeked, s.sniVerdict(ev, detail, enforce)
}

// sniVerdict is the outcome of a failed SNI check: the refusal under
// enforce (counted), else nil with would_deny noted on ev.
func (s *Server) sniVerdict(ev *event, detail string, enforce bool) *proxystatus.Error {
	if !enforce {
		if ev.dec.WouldDeny == "" {
			ev.dec.WouldDeny = "sni " + detail
		}
		return nil
	}
	s.countPolicy("sni")
	return &proxystatus.Error{Type: proxystatus.HTTPRequestDenied, Detail: detail}
}

// unfinished says why a sniff that a check needs did not finish ("" when it
// did): err and res.Cut are Sniff's.
func unfinished(res sniff.Result, err error) string {
	what := "the ClientHello"
	if res.Proto == sniff.HTTP {
		what = "the request's header"
	}
	switch {
	case err != nil || res.Cut == sniff.CutClosed:
		return "the client closed before " + what + " was complete"
	case res.Cut == sniff.CutTimeout && len(res.Peeked) == 0:
		return "nothing was sent within " + sniTimeout.String()
	case res.Cut == sniff.CutTimeout:
		return what + " was not complete after " + sniTimeout.String() + " (" + strconv.Itoa(len(res.Peeked)) + " bytes)"
	case res.Cut == sniff.CutMaxBytes:
		return what + " is larger than the " + strconv.Itoa(len(res.Peeked)) + " bytes read"
	case res.Cut == sniff.CutMalformed:
		return what + " does not parse"
	}
	return ""
}

// proxyAuth is a request's Proxy-Authorization value, "" when none.
func proxyAuth(h http.Header) string {
	if v := h["Proxy-Authorization"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

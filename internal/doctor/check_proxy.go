package doctor

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// echoScheme is the scheme whose proxy the proxy checks use.
func (s *state) echoScheme() string {
	if s.echo != nil {
		return s.echo.Scheme
	}
	return "https"
}

// proxyChecks send a CONNECT for the echo server through each distinct
// proxy the clients would use, and decode the answer.
func (s *state) proxyChecks() []Check {
	ps := s.proxies(s.echoScheme())
	if len(ps) == 0 {
		return []Check{{Name: "proxy", Run: func(context.Context) Result {
			if !s.anyProxySet() {
				return Result{Status: Warn, Summary: "no proxy to test: no proxy variable is set and no --proxy given",
					Advice: "Expected only with transparent interception; otherwise set the proxy variables (or pass --proxy)."}
			}
			return Result{Status: Warn, Summary: fmt.Sprintf("no proxy variable for %s:// URLs (%s unset)", s.echoScheme(), joinAnd(proxyVars(s.echoScheme())[:2])),
				Advice: "Set " + joinAnd(proxyVars(s.echoScheme())[:2]) + " if " + s.echoScheme() + " traffic must use the proxy."}
		}}}
	}
	var checks []Check
	for _, p := range ps {
		tgt := p.name() + " (" + p.source() + ")"
		checks = append(checks, Check{Name: "proxy", Target: tgt, Run: func(ctx context.Context) Result {
			return s.proxyResult(ctx, p)
		}})
	}
	return checks
}

func (s *state) proxyResult(ctx context.Context, p proxyChoice) Result {
	if p.err != nil {
		return Result{Status: Fail, Summary: p.err.Error(), Advice: "Fix " + p.source() + ": scheme://[user:password@]host:port, with special characters in the password percent-encoded."}
	}
	in := decodeIn{proxy: p.name(), source: p.source()}
	if p.url.User != nil {
		in.user = p.url.User.Username()
	}
	if s.echo == nil {
		// Without a destination, only reach the proxy.
		c, f := s.dialProxy(ctx, p.url)
		if f != nil {
			v := decodeProxyFailure(f, in)
			return Result{Status: v.status, Summary: v.summary, Details: v.details, Advice: v.advice}
		}
		c.Close()
		return Result{Status: Warn, Summary: fmt.Sprintf("the proxy %s accepts connections; its CONNECT answer is not tested without --echo", p.name()),
			Advice: "Pass --echo URL (an `egret echo` outside the cluster) to test the whole path."}
	}
	in.target = net.JoinHostPort(s.echo.Hostname(), portOf(s.echo))
	c, _, a, f := s.connectVia(ctx, p.url, in.target)
	if f != nil {
		v := decodeProxyFailure(f, in)
		return Result{Status: v.status, Summary: v.summary, Details: v.details, Advice: v.advice}
	}
	if a.code/100 == 2 {
		c.Close()
		r := Result{Status: Pass, Summary: fmt.Sprintf("%s answered %s to CONNECT %s", p.name(), a.status, in.target)}
		if via := a.header.Get("Via"); via != "" {
			r.Details = append(r.Details, "Via: "+via)
		}
		r.Details = append(r.Details, "proxy from "+p.source()+", port "+strconv.Itoa(int(proxyPort(p.url))))
		return r
	}
	v := decodeAnswer(a, in)
	return Result{Status: v.status, Summary: v.summary, Details: v.details, Advice: v.advice}
}

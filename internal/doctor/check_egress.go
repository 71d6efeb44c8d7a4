package doctor

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
)

// egressCheck asks the echo server which address it sees, once directly
// and once through the proxy, and compares.
func (s *state) egressCheck() Check {
	tgt := ""
	if s.echo != nil {
		tgt = s.echo.String()
	}
	return Check{Name: "egress-ip", Target: tgt, Run: func(ctx context.Context) Result {
		if s.echo == nil {
			return Result{Status: Warn, Summary: "no --echo URL: the egress IP is not checked",
				Advice: "Run `egret echo --listen :8080` outside the cluster and pass --echo http://HOST:8080/."}
		}
		var (
			wg                 sync.WaitGroup
			directIP, proxyIP  netip.Addr
			directErr, viaErr  error
			directF            *failure
			viaVerdict         *verdict
			proxyName, viaFrom string
		)
		ps := s.proxies(s.echo.Scheme)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, _, f := s.getDirect(ctx, s.echo, true)
			if f != nil {
				directF = f
				return
			}
			directIP, directErr = echoIP(a)
		}()
		if len(ps) > 0 && ps[0].url != nil {
			p := ps[0]
			proxyName, viaFrom = p.name(), p.source()
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := decodeIn{proxy: p.name(), source: p.source(), target: hostPortOf(s.echo)}
				if p.url.User != nil {
					in.user = p.url.User.Username()
				}
				a, pa, f, of := s.getVia(ctx, p.url, s.echo)
				switch {
				case f != nil:
					v := decodeProxyFailure(f, in)
					viaVerdict = &v
				case pa != nil:
					v := decodeAnswer(pa, in)
					viaVerdict = &v
				case of != nil:
					v := verdict{status: Fail, summary: "the proxy opened the tunnel, but " + of.Error(), details: []string{of.Error()}}
					if of.kind == fkTLS {
						v.advice = "The certificate of " + s.echo.Host + " is not trusted here. A proxy that intercepts TLS presents its own certificate: add its CA to the image's trust store (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, the JVM's cacerts)."
					} else {
						v.advice = "The echo server answers the proxy but not as expected; check --echo."
					}
					viaVerdict = &v
				default:
					proxyIP, viaErr = echoIP(a)
				}
			}()
		}
		wg.Wait()

		var r Result
		directBlocked := directF != nil && (directF.kind == fkRefused || directF.kind == fkTimeout || directF.kind == fkUnreachable)
		switch {
		case directF != nil:
			r.Details = append(r.Details, "direct: "+directF.Error())
		case directErr != nil:
			r.Details = append(r.Details, "direct: "+directErr.Error())
		default:
			r.Details = append(r.Details, "direct: the echo server sees "+directIP.String())
		}
		switch {
		case proxyName == "":
			r.Details = append(r.Details, "via proxy: no proxy for "+s.echo.Scheme+":// URLs")
		case viaVerdict != nil:
			r.Details = append(r.Details, "via proxy "+proxyName+": "+viaVerdict.summary)
		case viaErr != nil:
			r.Details = append(r.Details, "via proxy "+proxyName+": "+viaErr.Error())
		default:
			r.Details = append(r.Details, "via proxy "+proxyName+" (from "+viaFrom+"): the echo server sees "+proxyIP.String())
		}

		switch {
		case proxyName == "":
			r.Status = Warn
			if directIP.IsValid() {
				r.Summary = fmt.Sprintf("no proxy configured: the outside sees this pod as %s", directIP)
			} else {
				r.Summary = "no proxy configured, and the echo server is not reachable directly"
			}
			r.Advice = "Set the proxy variables (or --proxy) to compare the egress IP through the proxy."
		case viaVerdict != nil:
			r.Status = Fail
			r.Summary = "the echo server cannot be reached through the proxy: " + viaVerdict.summary
			r.Advice = viaVerdict.advice
		case viaErr != nil:
			r.Status = Fail
			r.Summary = "the answer through the proxy is not an egret echo reply: " + viaErr.Error()
			r.Advice = "Check that --echo points at `egret echo`; a proxy that rewrites answers (TLS interception, a captive page) also shows here."
		case directBlocked:
			r.Status = Pass
			r.Summary = fmt.Sprintf("egress IP through the proxy: %s; direct egress is blocked (%s), as a NetworkPolicy should make it", proxyIP, directF.what())
		case directF != nil || directErr != nil:
			r.Status = Pass
			r.Summary = fmt.Sprintf("egress IP through the proxy: %s; the direct request failed", proxyIP)
		case directIP == proxyIP:
			r.Status = Warn
			r.Summary = fmt.Sprintf("the proxy and direct egress both leave from %s: the proxy does not give a separate egress IP", proxyIP)
			r.Advice = "If partners allow-list the gateway's address, route this traffic through the gateway or the upstream pool (a sidecar with a direct default route, or a proxy on this node, leaves from the pod's or node's address). " +
				"Direct egress is also open: a NetworkPolicy can restrict the pod to DNS, the cluster and the proxy."
		default:
			r.Status = Pass
			r.Summary = fmt.Sprintf("egress IP through the proxy: %s; direct: %s (they differ, as expected)", proxyIP, directIP)
		}
		return r
	}}
}

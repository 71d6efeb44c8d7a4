package cli

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/doctor"
)

// Exit codes of `egret doctor`.
const (
	doctorExitFailed = 1 // at least one check failed
	doctorExitUsage  = 2 // bad flags
)

func newDoctorCmd() *cobra.Command {
	var (
		o          doctor.Options
		output     string
		verbose    bool
		resolvConf string
		pid1       string
		nameserver string
		echoes     []string
	)
	cmd := &cobra.Command{
		Use:   "doctor [--echo URL]... [--internal NAME ...] [--forbidden URL ...] [--proxy URL] [-o text|json]",
		Short: "Run the in-pod egress runbook: environment, DNS, proxy answer, egress IP, runtimes",
		Long: `doctor runs from inside a pod (kubectl exec) and checks, in parallel:

  env        the proxy variables in both cases
  pid1-env   PID 1's real environment (/proc/1/environ) against this shell's
  interceptors  a mesh proxy (Istio, Linkerd) capturing the pod's traffic beside egret
  no-proxy   NO_PROXY against the cluster destinations, for the runtimes in the image
  dns        the internal names, the echo host and the proxy host, with the search list
  direct     each internal name, its FQDN and ClusterIP reached directly (TCP; HTTP for URLs)
  runtimes   what each runtime (noproxy models) does with the internal names and the echo URL,
             and for a name sent to the proxy, what the proxy answers (a NO_PROXY hole)
  proxy      the proxy's answer to CONNECT for the echo server, decoded: 407 credentials,
             403 policy or IP allow-list, 502/503 NO_PROXY hole or dead target (egret's
             Proxy-Status names the error and the upstream), refused, timeout
  egress-ip  the address an egret echo server sees with and without the proxy
  tls        an https URL reached through the proxy: the issuer presented (intercepted
             or not) and, per runtime in the image, whether it will trust it
  forbidden  each --forbidden URL must be blocked: not reachable directly (NetworkPolicy,
             firewall) and refused by the proxy's policy — never answered

The checks prove the runbook's four paths: Service direct (--internal), intranet
direct (--intranet), outside via the proxy (--echo; IPv4 and IPv6 separately,
--samples per path, --expect-egress-ip) and a forbidden target blocked
(--forbidden). -o json adds the run record: pod, node, images, egret's version,
the injected configuration's hashes, DNS answers, status codes, egress IPs.

For a distroless application, run the doctor from an ephemeral container that
shares its processes and adopt its environment and runtimes (docs/doctor.md):
  kubectl debug -it POD --image=EGRET_IMAGE --target=app --profile=general \
    --custom=root.json -- /egret doctor --app-pid 1 --echo URL

Each check says pass, warn or fail, what it saw and what to do. Proxy URLs are
shown without their password.

Runtimes: go, plus those found on PATH (curl, wget, python, node, java, ruby,
dotnet); --client replaces the list. Internal names: NAME, NAME:PORT or an
http(s) URL; a NAME without a port means 443 for the API server names
(kubernetes...) and 80 otherwise. Default: kubernetes.default.svc and its FQDN
(cluster domain from resolv.conf's search list).

Exit status: 0 every check passed (warnings allowed), 1 at least one check
failed, 2 bad usage.`,
		Example: `  kubectl exec deploy/orders -- egret doctor --echo http://echo.example.com:8080/
  egret doctor --internal payments:8080 --internal http://inventory.shop/healthz -o json
  egret doctor --proxy http://egret-gateway.egress:3128 --echo http://203.0.113.7:8080/`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &ExitError{Code: doctorExitUsage, Err: fmt.Errorf("doctor takes no arguments (got %q): use --internal NAME", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			usage := func(err error) error { return &ExitError{Code: doctorExitUsage, Err: err} }
			if output != "text" && output != "json" {
				return usage(fmt.Errorf("unknown output format %q (want text or json)", output))
			}
			// Any user info counts, with or without a scheme (user:pass@gw:3128
			// is accepted too, and url.Parse would take "user" for a scheme).
			if at := strings.LastIndexByte(o.Proxy, '@'); at > 0 && strings.Contains(o.Proxy[:at], ":") {
				fmt.Fprintln(cmd.ErrOrStderr(), "egret: warning: a password in --proxy is visible to other processes (ps); prefer the HTTPS_PROXY variable")
			}
			d := doctor.Deps{ResolvConf: resolvConf, PID1Environ: pid1}
			if nameserver != "" {
				if _, _, err := net.SplitHostPort(nameserver); err != nil {
					nameserver = net.JoinHostPort(nameserver, "53")
				}
				d.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
					var nd net.Dialer
					return nd.DialContext(ctx, network, nameserver)
				}}
			}
			switch len(echoes) {
			case 0:
			case 1:
				o.Echo = echoes[0]
			case 2:
				o.Echo, o.SecondEcho = echoes[0], echoes[1]
			default:
				return usage(fmt.Errorf("--echo: at most two echo URLs (got %d)", len(echoes)))
			}
			rep, err := doctor.RunReport(cmd.Context(), o, d)
			if err != nil {
				return usage(err)
			}
			w := cmd.OutOrStdout()
			if output == "json" {
				err = doctor.WriteReportJSON(w, rep)
			} else {
				err = doctor.WriteReportText(w, rep, verbose)
			}
			if err != nil {
				return fmt.Errorf("write report: %w", err)
			}
			if doctor.Worst(rep.Checks) == doctor.Fail {
				return &ExitError{Code: doctorExitFailed}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&echoes, "echo", nil, "URL of an `egret echo` server outside the cluster (enables the proxy CONNECT and egress IP checks); give it twice to compare two echo servers")
	f.IntVar(&o.Samples, "samples", 1, "requests per path (direct, through the proxy) per echo server and address family")
	f.StringSliceVar(&o.ExpectEgressIP, "expect-egress-ip", nil, "address (IP or CIDR) the outside must see through the proxy (repeatable): the allow-listed egress IPs")
	f.StringVar(&o.Family, "family", "", "check only this address family: 4 or 6 (default: each family the destination has)")
	f.StringArrayVar(&o.Forbidden, "forbidden", nil, "URL that must be blocked: not reachable directly, refused by the proxy (repeatable)")
	f.StringSliceVar(&o.Intranet, "intranet", nil, "destination outside the cluster that must be reached directly: NAME, NAME:PORT or http(s) URL (repeatable)")
	f.IntVar(&o.AppPID, "app-pid", 0, "check as the process with this PID would (its environment, runtimes, root file system): with kubectl debug --target, 1")
	f.StringSliceVar(&o.Internal, "internal", nil, "in-cluster destination: NAME, NAME:PORT or http(s) URL (repeatable; default kubernetes.default.svc and its FQDN)")
	f.StringVar(&o.Proxy, "proxy", "", "proxy URL to test instead of the environment's (prefer the variables for credentials)")
	f.StringSliceVar(&o.Clients, "client", nil, "runtimes to predict (noproxy client names, repeatable, or all; default go and those on PATH)")
	f.DurationVar(&o.Timeout, "timeout", doctor.DefaultTimeout, "bound of each network operation (lookup, connect, answer)")
	f.StringSliceVar(&o.TLS, "tls", nil, "https URL to connect to through the proxy: the issuer it presents and which runtimes trust it (repeatable; default the https --echo URL)")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	f.BoolVarP(&verbose, "verbose", "v", false, "text output: details of passing checks too")
	f.StringVar(&resolvConf, "resolv-conf", doctor.DefaultResolvConf, "resolv.conf to read the search list from")
	f.StringVar(&pid1, "pid1-environ", doctor.DefaultPID1Environ, "environment file of the application's process")
	f.StringVar(&nameserver, "nameserver", "", "ask this DNS server (HOST[:PORT]) instead of the system resolver, e.g. the cluster DNS")
	return cmd
}

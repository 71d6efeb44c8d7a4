package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/iptables"
)

// Exit codes of `egret iptables` (documented in docs/transparent.md).
const (
	iptablesExitValidation = 3 // the rules are in place but the probe was not redirected
)

type iptablesFlags struct {
	spec           iptables.Spec
	backend        string
	output         string
	dryRun         bool
	skipValidation bool
	probeAddrs     []string
	probeTimeout   time.Duration
}

func newIptablesCmd() *cobra.Command {
	f := &iptablesFlags{}
	cmd := &cobra.Command{
		Use:   "iptables",
		Short: "Write, print, remove or validate the NAT rules of transparent mode (init container)",
		Long: `egret iptables manages the NAT rules that send a pod's outbound TCP to egret's
transparent listener: own chains EGRET_OUTPUT and EGRET_REDIRECT in the nat table of the
current network namespace, one jump from OUTPUT. Traffic of the proxy's UID (and GID),
loopback, excluded interfaces, ports and CIDRs goes direct; with --include-cidrs only
those destinations are redirected.

Exit codes: 0 success; 1 error (bad flags, no NET_ADMIN, iptables failed);
3 validation failed (the rules are in place but a probe connection was not redirected).`,
	}
	pf := cmd.PersistentFlags()
	pf.IntVar(&f.spec.ProxyUID, "proxy-uid", iptables.DefaultProxyUID, "UID of the proxy; its traffic is never redirected")
	pf.IntVar(&f.spec.ProxyGID, "proxy-gid", -1, "GID whose traffic is never redirected (-1 = none)")
	pf.StringSliceVar(&f.spec.ExcludeUIDs, "exclude-uids", nil, "other UIDs whose traffic is never redirected, e.g. a service mesh's proxy (comma-separated)")
	pf.IntVar(&f.spec.RedirectPort, "redirect-port", iptables.DefaultRedirectPort, "port of the transparent listener on loopback")
	pf.StringSliceVar(&f.spec.ExcludeCIDRs, "exclude-cidrs", nil, "destinations that go direct (CIDRs or addresses, comma-separated)")
	pf.StringSliceVar(&f.spec.IncludeCIDRs, "include-cidrs", nil, "if set, only these destinations are redirected")
	pf.StringSliceVar(&f.spec.ExcludePorts, "exclude-ports", nil, "destination ports that go direct (22 or 8000-8100, comma-separated)")
	pf.StringSliceVar(&f.spec.ExcludeInterfaces, "exclude-interfaces", nil, "outgoing interfaces whose traffic goes direct (trailing + = prefix)")
	pf.BoolVar(&f.spec.IPv6, "ipv6", false, "also write ip6tables rules")
	pf.StringVar(&f.backend, "backend", "auto", "iptables backend: auto (detect), nft or legacy")
	pf.StringVarP(&f.output, "output", "o", "text", "output format: text or json")

	apply := &cobra.Command{
		Use:   "apply",
		Short: "Write the rules (replacing any earlier egret rules), then validate them",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runIptables(cmd, f, "apply") },
	}
	apply.Flags().BoolVar(&f.dryRun, "dry-run", false, "print the iptables-restore text, change nothing")
	apply.Flags().BoolVar(&f.skipValidation, "skip-validation", false, "do not probe the redirect after writing the rules")
	addProbeFlags(apply, f)

	remove := &cobra.Command{
		Use:   "remove",
		Short: "Delete egret's rules and chains",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runIptables(cmd, f, "remove") },
	}
	remove.Flags().BoolVar(&f.dryRun, "dry-run", false, "print the iptables-restore text, change nothing")

	printCmd := &cobra.Command{
		Use:   "print",
		Short: "Print the iptables-restore text of the rules (same as apply --dry-run)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.dryRun = true
			return runIptables(cmd, f, "apply")
		},
	}

	validate := &cobra.Command{
		Use:   "validate",
		Short: "Probe that outbound TCP is redirected to the redirect port (which must be free)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runIptables(cmd, f, "validate") },
	}
	addProbeFlags(validate, f)

	cmd.AddCommand(apply, remove, printCmd, validate)
	return cmd
}

func addProbeFlags(cmd *cobra.Command, f *iptablesFlags) {
	cmd.Flags().StringSliceVar(&f.probeAddrs, "probe-addr", nil,
		"IP:PORT the rules must redirect, probed during validation (default 192.0.2.1:80, and [2001:db8::1]:80 with --ipv6)")
	cmd.Flags().DurationVar(&f.probeTimeout, "probe-timeout", iptables.DefaultProbeTimeout, "time allowed per probe connection")
}

// iptablesReport is the stable -o json shape.
type iptablesReport struct {
	Action     string             `json:"action"`
	Backend    string             `json:"backend,omitempty"`
	DryRun     bool               `json:"dry_run"`
	Families   []iptablesFamily   `json:"families"`
	Validation *iptablesValidated `json:"validation,omitempty"`
}

type iptablesFamily struct {
	Family  string     `json:"family"`
	Restore string     `json:"restore"` // the rules (apply) or the removal transaction
	Rules   [][]string `json:"rules"`   // argv of `iptables` commands equivalent to the rules
	Changed bool       `json:"changed"`
}

type iptablesValidated struct {
	OK      bool     `json:"ok"`
	Targets []string `json:"targets"`
	Error   string   `json:"error,omitempty"`
}

func runIptables(cmd *cobra.Command, f *iptablesFlags, action string) error {
	if f.output != "text" && f.output != "json" {
		return usageError(fmt.Errorf("--output %q: want text or json", f.output))
	}
	cfg, err := f.spec.Compile()
	if err != nil {
		return usageError(err)
	}
	backend, err := iptables.ParseBackend(f.backend)
	if err != nil {
		return usageError(err)
	}
	stderr := cmd.ErrOrStderr()
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	rep := iptablesReport{Action: action, DryRun: f.dryRun, Families: []iptablesFamily{}}
	m := &iptables.Manager{Backend: backend, Logf: func(format string, args ...any) {
		fmt.Fprintf(stderr, "egret iptables: "+format+"\n", args...)
	}}

	// Check the probe's inputs before changing anything.
	validate := action == "validate" || (action == "apply" && !f.dryRun && !f.skipValidation)
	var probe iptables.Probe
	if validate {
		if probe, err = prepareProbe(cfg, f); err != nil {
			return err
		}
	}

	var runErr error
	switch {
	case action == "validate":
	case f.dryRun:
		for _, fam := range cfg.Families() {
			rs := iptables.Build(cfg, fam)
			text := rs.RestoreText()
			if action == "remove" {
				text = rs.RemoveText()
			}
			rep.Families = append(rep.Families, familyReport(rs, text, false))
		}
	default:
		var res iptables.Result
		if action == "apply" {
			res, runErr = m.Apply(ctx, cfg)
		} else {
			res, runErr = m.Remove(ctx, cfg)
		}
		rep.Backend = res.Backend.String()
		for _, fr := range res.Families {
			text := fr.Rules.RestoreText()
			if action == "remove" {
				text = fr.Applied
			}
			rep.Families = append(rep.Families, familyReport(fr.Rules, text, fr.Applied != ""))
		}
	}

	var valErr error
	if validate && runErr == nil {
		rep.Validation = &iptablesValidated{Targets: []string{}}
		for _, t := range probe.Targets {
			rep.Validation.Targets = append(rep.Validation.Targets, t.String())
		}
		valErr = probe.Run(ctx)
		rep.Validation.OK = valErr == nil
		if valErr != nil {
			rep.Validation.Error = valErr.Error()
		}
	}
	if err := writeIptablesReport(cmd.OutOrStdout(), f.output, rep); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	if valErr != nil {
		if errors.Is(valErr, iptables.ErrNotRedirected) {
			return &ExitError{Code: iptablesExitValidation, Err: fmt.Errorf("validation failed: %w", valErr)}
		}
		return fmt.Errorf("validation: %w", valErr)
	}
	if rep.Validation != nil {
		fmt.Fprintf(stderr, "egret iptables: validation passed: %s redirected to port %d\n", strings.Join(rep.Validation.Targets, ", "), cfg.RedirectPort)
	}
	if action == "remove" && !f.dryRun && f.output == "text" {
		changed := false
		for _, fam := range rep.Families {
			changed = changed || fam.Changed
		}
		if !changed {
			fmt.Fprintln(stderr, "egret iptables: no egret rules found; nothing removed")
		}
	}
	return nil
}

func familyReport(rs iptables.Ruleset, text string, changed bool) iptablesFamily {
	fr := iptablesFamily{Family: rs.Family.String(), Restore: text, Rules: [][]string{}, Changed: changed}
	for _, r := range rs.Rules {
		fr.Rules = append(fr.Rules, r.Argv())
	}
	return fr
}

// prepareProbe checks that a probe can prove anything (not running as the
// proxy's UID/GID, targets the rules redirect) and builds it.
func prepareProbe(cfg iptables.Config, f *iptablesFlags) (iptables.Probe, error) {
	if uint32(os.Geteuid()) == cfg.ProxyUID {
		return iptables.Probe{}, fmt.Errorf("validation: running as the proxy uid %d, whose traffic is never redirected; run as another user or pass --skip-validation", cfg.ProxyUID)
	}
	if cfg.HasProxyGID && uint32(os.Getegid()) == cfg.ProxyGID {
		return iptables.Probe{}, fmt.Errorf("validation: running as the proxy gid %d, whose traffic is never redirected; run as another group or pass --skip-validation", cfg.ProxyGID)
	}
	var targets []netip.AddrPort
	for _, e := range f.probeAddrs {
		for _, v := range strings.Split(e, ",") {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			ap, err := netip.ParseAddrPort(v)
			if err != nil {
				return iptables.Probe{}, usageError(fmt.Errorf("--probe-addr %q: want IP:PORT ([IPv6]:PORT)", v))
			}
			if !cfg.Redirected(ap) {
				return iptables.Probe{}, usageError(fmt.Errorf("--probe-addr %s: these rules never redirect it (excluded, not included, loopback, or IPv6 without --ipv6)", ap))
			}
			targets = append(targets, ap)
		}
	}
	if len(targets) == 0 {
		var err error
		if targets, err = iptables.DefaultProbeTargets(cfg); err != nil {
			return iptables.Probe{}, fmt.Errorf("validation: %w", err)
		}
	}
	return iptables.Probe{RedirectPort: cfg.RedirectPort, Targets: targets, Timeout: f.probeTimeout}, nil
}

func writeIptablesReport(w io.Writer, format string, rep iptablesReport) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	for _, fam := range rep.Families {
		if fam.Restore == "" {
			continue
		}
		tool := "iptables"
		if fam.Family == iptables.IPv6.String() {
			tool = "ip6tables"
		}
		fmt.Fprintf(w, "# %s: %s-restore --noflush\n%s", fam.Family, tool, fam.Restore)
	}
	return nil
}

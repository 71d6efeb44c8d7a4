package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/logging"
	"egret.io/egret/internal/logsink"
	"egret.io/egret/internal/proxyd"
	"egret.io/egret/internal/version"
)

func newProxyCmd() *cobra.Command {
	var file string
	values := map[string]*string{}
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the forward proxy (sidecar or egress gateway)",
		Long: `Run egret's forward proxy: HTTP/1.1 absolute-URI forwarding and CONNECT tunnels,
routed per destination to direct, an upstream pool, or deny.

Settings come from --config (YAML), then the environment, then flags (flags win).
Every flag has an environment variable; the names used by real sidecar manifests
work unchanged: LISTEN_ADDR, DIRECT_CIDRS, DIRECT_SUFFIXES, UPSTREAM_PROXY,
HTTP(S)_PROXY/http(s)_proxy with NO_PROXY/no_proxy, PROXY_HOST/PROXY_USER/PROXY_PASS.
Credentials are read only from the environment or files, never from flags.

With no upstream configured, everything not denied goes direct.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flags := map[string]string{}
			for env, v := range values {
				if f := cmd.Flags().Lookup(flagName(env)); f != nil && f.Changed {
					flags[env] = *v
				}
			}
			if file == "" {
				file = os.Getenv("EGRET_CONFIG")
			}
			src := config.Sources{File: file, Flags: flags}
			cfg, err := config.Load(src)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			// One JSON line per request: batch the writes (flushed every
			// 100ms and on exit) instead of one system call per line.
			out := logsink.New(cmd.ErrOrStderr(), 0, 0)
			defer out.Close()
			// client-go (the policy watch) logs into the same stream.
			h := logging.NewHandler(out, logging.Format(cfg.LogFormat), cfg.LevelVar())
			logging.Route(h)
			log := slog.New(h)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			done := make(chan struct{})
			defer close(done)
			go exitOnSecondSignal(ctx, done, log, out)
			// SIGHUP and a change of the configuration file reload routes,
			// rules and pools.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			return logExit(log, "egret proxy", proxyd.Run(ctx, cfg, proxyd.Options{Version: version.Get().Version, Logger: log, AccessLog: out,
				Reload: func() (*config.Proxy, error) { return config.Load(src) }, ConfigFile: file, Hangup: hup}))
		},
	}
	cmd.Flags().StringVar(&file, "config", "", "YAML configuration file (env EGRET_CONFIG)")
	for _, k := range config.Keys {
		if k.Flag == "" {
			continue
		}
		v := new(string)
		values[k.Env] = v
		cmd.Flags().Var(textValue{v, k.Type}, k.Flag, k.Help+" (env "+k.Env+")")
		if k.Bool {
			cmd.Flags().Lookup(k.Flag).NoOptDefVal = "true"
		}
	}
	return cmd
}

// logExit ends a server whose log is set up: its error is the last line
// of that log, in its format (not "egret: ..." text after JSON lines), and
// the process exits 1.
func logExit(log *slog.Logger, what string, err error) error {
	if err == nil {
		return nil
	}
	log.Error(what+" stopped", "err", err.Error())
	return &ExitError{Code: 1}
}

// textValue is a flag kept as text, as the environment gives it (config.Load
// parses and checks both alike), whose --help names what it takes
// (--max-tunnels int, --dial-timeout duration) instead of "string".
type textValue struct {
	p   *string
	typ string
}

func (v textValue) String() string     { return *v.p }
func (v textValue) Set(s string) error { *v.p = s; return nil }
func (v textValue) Type() string       { return v.typ }

// exitOnSecondSignal waits for the first SIGTERM or SIGINT (ctx done: the
// drain begins), then exits the process at once on a second one: an
// operator pressing Ctrl-C twice does not wait for the drain. It returns
// when done closes (the proxy stopped).
func exitOnSecondSignal(ctx context.Context, done <-chan struct{}, log *slog.Logger, out io.Closer) {
	select {
	case <-ctx.Done():
	case <-done:
		return
	}
	second := make(chan os.Signal, 1)
	signal.Notify(second, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(second)
	select {
	case s := <-second:
		log.Warn("second signal: exiting without waiting for the drain", "signal", s.String())
		out.Close()
		code := 128 + int(syscall.SIGINT)
		if s == syscall.SIGTERM {
			code = 128 + int(syscall.SIGTERM)
		}
		os.Exit(code)
	case <-done:
	}
}

func flagName(env string) string {
	for _, k := range config.Keys {
		if k.Env == env {
			return k.Flag
		}
	}
	return ""
}

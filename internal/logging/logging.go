// Package logging makes egret's process log: one log/slog handler, JSON (the
// default, one object per line with time, level and msg) or text
// (--log-format text), and routes into it what the Kubernetes libraries log
// on their own — client-go and apimachinery through klog, controller-runtime
// through its logr logger — so that a reflector's "failed to list" is a line
// of the same stream with the same fields, not a klog text line inside JSON.
//
// klog's verbosity maps to slog levels as logr does: V(1) is slog level -1,
// V(4) is DEBUG; at the default info level no V(n>0) line is written.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Format is the encoding of log lines.
type Format string

const (
	JSON Format = "json" // one JSON object per line (default)
	Text Format = "text" // slog's key=value text
)

// ParseFormat reads a --log-format value.
func ParseFormat(s string) (Format, error) {
	switch Format(strings.ToLower(strings.TrimSpace(s))) {
	case "", JSON:
		return JSON, nil
	case Text:
		return Text, nil
	}
	return "", fmt.Errorf("log format %q: want json or text", s)
}

// ParseLevel reads a --log-level value: debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// NewHandler returns the handler writing format to w at level.
func NewHandler(w io.Writer, f Format, level slog.Leveler) slog.Handler {
	o := &slog.HandlerOptions{Level: level}
	if f == Text {
		return slog.NewTextHandler(w, o)
	}
	return slog.NewJSONHandler(w, o)
}

// Route makes h the destination of klog (client-go, apimachinery, their
// contextual loggers included) and of controller-runtime's logger. klog's
// and controller-runtime's loggers are process-wide and not safe to replace
// while their goroutines log, so they are set once, before any goroutine
// runs (init), to a handler that forwards to the latest h: Route, called by
// each command (tests run several in one process), changes only where the
// lines go. Until the first Route they go to stderr as slog text.
func Route(h slog.Handler) { routed.Store(&h) }

var routed atomic.Pointer[slog.Handler]

func init() {
	h := slog.Handler(slog.NewTextHandler(os.Stderr, nil))
	routed.Store(&h)
	klog.SetSlogLogger(slog.New(forward{}))
	crlog.SetLogger(logr.FromSlogHandler(forward{}))
}

// forward is the handler klog and controller-runtime hold: it applies its
// attributes and groups to the handler Route set last, at each record.
type forward struct {
	ops []func(slog.Handler) slog.Handler
}

func (f forward) handler() slog.Handler {
	h := *routed.Load()
	for _, op := range f.ops {
		h = op(h)
	}
	return h
}

func (f forward) Enabled(ctx context.Context, l slog.Level) bool {
	return (*routed.Load()).Enabled(ctx, l)
}

func (f forward) Handle(ctx context.Context, r slog.Record) error { return f.handler().Handle(ctx, r) }

func (f forward) with(op func(slog.Handler) slog.Handler) forward {
	return forward{ops: append(f.ops[:len(f.ops):len(f.ops)], op)}
}

func (f forward) WithAttrs(as []slog.Attr) slog.Handler {
	return f.with(func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })
}

func (f forward) WithGroup(name string) slog.Handler {
	return f.with(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}

// Flags are a command's --log-format and --log-level.
type Flags struct {
	Format string
	Level  string
}

// Add registers the flags with their defaults: JSON for a server, text for
// a command a person runs.
func (f *Flags) Add(fs *pflag.FlagSet, format Format, level string) {
	fs.StringVar(&f.Format, "log-format", string(format), "`format` of the log lines, client-go's included: json or text")
	fs.StringVar(&f.Level, "log-level", level, "log `level`: debug, info, warn or error")
}

// Logger checks the flags and returns the logger writing to w, with the
// Kubernetes libraries routed into it (Route).
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	format, err := ParseFormat(f.Format)
	if err != nil {
		return nil, fmt.Errorf("--log-format: %w", err)
	}
	level, err := ParseLevel(f.Level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	h := NewHandler(w, format, level)
	Route(h)
	return slog.New(h), nil
}

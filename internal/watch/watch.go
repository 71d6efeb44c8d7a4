package watch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults for Files fields left zero.
const (
	DefaultInterval = 10 * time.Second
	DefaultSettle   = 100 * time.Millisecond
)

// Files watches a set of files and reports their content when it changes.
type Files struct {
	// Paths are the files to read. All are read together; Load gets them in
	// this order.
	Paths []string
	// Optional are those of Paths that may be missing: Load gets nil for
	// them. A missing file of the others is a read error.
	Optional []string
	// Interval is the period of the safety-net re-read; zero means
	// DefaultInterval, negative disables it.
	Interval time.Duration
	// Settle is how long to wait after a file system event before reading,
	// so the several events of one swap lead to one read; zero means
	// DefaultSettle.
	Settle time.Duration
	// Load receives the content of every file after a change (and once at
	// start when Run is called without a prior Read). It returns an error
	// when the content is not acceptable; the previous content then stays
	// in force and the same content is not offered again.
	Load func(contents [][]byte) error
	// Failed, when set, is told about read and Load errors, once per
	// distinct error message in a row (not on every tick).
	Failed func(err error)

	last     [][]byte
	lastErr  string
	haveLast bool
}

// Read reads every file once and returns the contents, without calling Load.
// Run afterwards reports only changes relative to what Read returned.
func (f *Files) Read() ([][]byte, error) {
	c, err := f.read()
	if err != nil {
		return nil, err
	}
	f.last, f.haveLast = c, true
	return c, nil
}

func (f *Files) read() ([][]byte, error) {
	out := make([][]byte, len(f.Paths))
	for i, p := range f.Paths {
		b, err := os.ReadFile(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && slices.Contains(f.Optional, p) {
				continue
			}
			return nil, fmt.Errorf("read %s: %w", p, unwrapPath(err))
		}
		out[i] = b
	}
	return out, nil
}

// unwrapPath drops the *PathError wrapper, whose text repeats the path.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// check re-reads the files and calls Load when something changed.
func (f *Files) check() {
	c, err := f.read()
	if err == nil && f.haveLast && equal(c, f.last) {
		f.lastErr = ""
		return
	}
	if err == nil {
		err = f.Load(c)
		// Accepted or not, this content has been seen: do not offer it again.
		f.last, f.haveLast = c, true
	}
	if err != nil {
		if msg := err.Error(); msg != f.lastErr {
			f.lastErr = msg
			if f.Failed != nil {
				f.Failed(err)
			}
		}
		return
	}
	f.lastErr = ""
}

func equal(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) || (a[i] == nil) != (b[i] == nil) {
			return false
		}
	}
	return true
}

// Run watches until ctx ends. When Read was not called before, the files
// are read and loaded once first. It returns nil when ctx ends; a failure to
// set up inotify is not fatal (the periodic re-read still runs) and is
// reported through Failed.
func (f *Files) Run(ctx context.Context) error {
	if f.Load == nil {
		return errors.New("watch: no Load function")
	}
	interval := f.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	settle := f.Settle
	if settle <= 0 {
		settle = DefaultSettle
	}
	if !f.haveLast {
		f.check()
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w, err := fsnotify.NewWatcher(); err != nil {
		if f.Failed != nil {
			f.Failed(fmt.Errorf("watch files: %w (re-reading every %s instead)", err, interval))
		}
	} else {
		defer w.Close()
		seen := map[string]bool{}
		for _, p := range f.Paths {
			dir := filepath.Dir(p)
			if seen[dir] {
				continue
			}
			seen[dir] = true
			if err := w.Add(dir); err != nil && f.Failed != nil {
				f.Failed(fmt.Errorf("watch %s: %w (re-reading every %s instead)", dir, unwrapPath(err), interval))
			}
		}
		events, errs = w.Events, w.Errors
	}
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	var settleTimer *time.Timer
	var settleC <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if settleTimer != nil {
				settleTimer.Stop()
			}
			return nil
		case <-events:
			if settleTimer == nil {
				settleTimer = time.NewTimer(settle)
			} else {
				settleTimer.Reset(settle)
			}
			settleC = settleTimer.C
		case <-errs:
			// Overflow and the like: the next read catches up.
			f.check()
		case <-settleC:
			settleC = nil
			f.check()
		case <-tick:
			f.check()
		}
	}
}

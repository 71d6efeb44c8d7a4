// Package logsink batches log lines before they reach the output, so a
// proxy that writes one JSON line per request does not pay one write system
// call per request. Lines are flushed when the batch fills, at a short
// interval, and on Close; a line is never split. What is written in the
// last interval before a crash may be lost.
package logsink

import (
	"io"
	"sync"
	"time"
)

// Defaults for New.
const (
	DefaultSize     = 64 << 10
	DefaultInterval = 100 * time.Millisecond
)

// Writer is a batching io.Writer, safe for concurrent use.
type Writer struct {
	mu     sync.Mutex
	out    io.Writer
	buf    []byte
	size   int
	err    error
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

// New returns a Writer that batches up to size bytes (DefaultSize if 0) and
// flushes every interval (DefaultInterval if 0).
func New(out io.Writer, size int, interval time.Duration) *Writer {
	if size <= 0 {
		size = DefaultSize
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	w := &Writer{out: out, buf: make([]byte, 0, size), size: size, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				w.Flush()
			}
		}
	}()
	return w
}

// Write adds p to the batch; a write larger than the batch, or one that
// fills it, is flushed at once.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.out.Write(p)
	}
	if len(w.buf)+len(p) > w.size {
		w.flushLocked()
		if len(p) > w.size {
			_, err := w.out.Write(p)
			return len(p), err
		}
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// Flush writes the batch out now.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked()
	return w.err
}

func (w *Writer) flushLocked() {
	if len(w.buf) == 0 {
		return
	}
	if _, err := w.out.Write(w.buf); err != nil && w.err == nil {
		w.err = err
	}
	w.buf = w.buf[:0]
}

// Close flushes and stops batching: later writes go straight through.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return w.err
	}
	w.closed = true
	w.flushLocked()
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	return w.err
}

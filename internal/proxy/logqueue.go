package proxy

import (
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The access log is written off the goroutines that serve clients. finish
// builds the line's record on the connection's goroutine — a copy of the
// event, no allocation — and hands it to a bounded queue; one logger
// goroutine per server encodes the JSON and writes it. Nothing waits on
// the log: when the queue is full (the sink is slower than the traffic),
// the record is dropped and counted (egret_proxy_access_log_dropped_total,
// and a warning in the process log at most once a second), so a slow or
// stuck log sink never holds a client, a tunnel or memory beyond the
// queue. Dropping, not waiting, because a proxy that stalls its traffic on
// its log turns a full disk or a slow collector into an outage; the
// counter says the log is incomplete. What a request or tunnel holds is
// released by its lease, never by its log line.

// logQueueLen is how many records may wait for the logger: about 400 KiB
// of events, a few tens of milliseconds of lines at full speed.
const logQueueLen = 1024

// logRecord is one line to write: the event as it ended and the values
// finish computed for it. A record with flush set is a marker: the logger
// closes it once everything queued before it is written.
type logRecord struct {
	ev                   event
	now                  time.Time
	dur                  time.Duration
	action, reason, pool string
	flush                chan struct{}
}

// accessLogger writes the access log lines queued by finish.
type accessLogger struct {
	out     io.Writer
	q       chan logRecord
	dropped atomic.Int64
	// dropCounter counts drops (nil without metrics).
	dropCounter prometheus.Counter
	plog        *slog.Logger // the process log, for the drops
}

// newAccessLogger starts the logger of a server. Its goroutine lives as
// long as the process (a server's lines may end after its Shutdown, when
// connections it cut off finish); it waits on the queue when there is
// nothing to write.
func newAccessLogger(out io.Writer, log *slog.Logger, dropped prometheus.Counter) *accessLogger {
	l := &accessLogger{out: out, q: make(chan logRecord, logQueueLen), dropCounter: dropped, plog: log}
	go l.run()
	return l
}

// log queues r, or drops it (counted) when the queue is full.
func (l *accessLogger) log(r logRecord) {
	select {
	case l.q <- r:
	default:
		l.dropped.Add(1)
		if l.dropCounter != nil {
			l.dropCounter.Inc()
		}
	}
}

// logTick is how often a busy logger takes what was queued: a request
// queues its record without waking anyone, and one wake-up writes the
// lines of a few milliseconds together.
const logTick = 5 * time.Millisecond

// run writes the queued lines. Idle, it waits on the queue; the first
// record wakes it, and it then drains the queue every logTick until a tick
// finds nothing. It warns of lines dropped at most once a second.
func (l *accessLogger) run() {
	t := time.NewTicker(logTick)
	t.Stop()
	var warned int64
	var next time.Time
	for r := range l.q {
		l.write(&r)
		t.Reset(logTick)
		for {
			<-t.C
			n := l.drain()
			if d := l.dropped.Load(); d != warned {
				if now := time.Now(); now.After(next) {
					l.plog.Warn("access log: lines dropped, the log's output is slower than the traffic",
						"dropped", strconv.FormatInt(d-warned, 10), "dropped_total", strconv.FormatInt(d, 10))
					warned, next = d, now.Add(time.Second)
				}
			}
			if n == 0 {
				break
			}
		}
		t.Stop()
	}
}

// drain writes what is queued now and returns how many records it took.
func (l *accessLogger) drain() int {
	for n := 0; ; n++ {
		select {
		case r := <-l.q:
			l.write(&r)
		default:
			return n
		}
	}
}

func (l *accessLogger) write(r *logRecord) {
	if r.flush != nil {
		l.syncOut()
		close(r.flush)
		return
	}
	writeLine(l.out, r)
}

// syncOut writes out what the output batches (internal/logsink).
func (l *accessLogger) syncOut() {
	if f, ok := l.out.(interface{ Flush() error }); ok {
		f.Flush()
	}
}

// flush waits until the lines queued before it are written (and the
// output's batch with them), for at most d (a stuck output does not hold
// the caller).
func (l *accessLogger) flush(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	ch := make(chan struct{})
	select {
	case l.q <- logRecord{flush: ch}:
	case <-t.C:
		return
	}
	select {
	case <-ch:
	case <-t.C:
	}
}

// FlushAccessLog waits until the access log lines of the requests and
// tunnels that have ended are written, and of the requests the explicit
// listener is answering now (at most 2 s for those): a test reads the log
// after it, and shutdown writes the last lines with it.
func (s *Server) FlushAccessLog() {
	if s.alog == nil {
		return
	}
	for deadline := time.Now().Add(2 * time.Second); s.answering() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	s.alog.flush(5 * time.Second)
}

// answering reports whether a client connection of the explicit listener
// is in a request (its line is not queued yet).
func (s *Server) answering() bool {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	for cc := range s.conns {
		if cc.state.Load() == connActive {
			return true
		}
	}
	return false
}

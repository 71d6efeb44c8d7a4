package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"egret.io/egret/internal/testutil"
)

// stuckLog is an access log output that blocks every write until it is
// released: a full disk, a collector that stopped reading a pipe.
type stuckLog struct {
	release chan struct{}
	once    sync.Once
	out     testutil.SyncBuffer
}

func (l *stuckLog) Write(p []byte) (int, error) {
	<-l.release
	return l.out.Write(p)
}

func (l *stuckLog) unblock() { l.once.Do(func() { close(l.release) }) }

// TestAccessLogStuckOutput: an access log output that does not take the
// lines holds no client — every request is answered while it is stuck —
// and no memory beyond the queue: the lines that do not fit are dropped,
// counted (egret_proxy_access_log_dropped_total) and reported in the
// process log once the logger can write again, without anything secret.
// Every line queued is written once the output takes lines again.
func TestAccessLogStuckOutput(t *testing.T) {
	const n = logQueueLen + 300
	sink := &stuckLog{release: make(chan struct{})}
	t.Cleanup(sink.unblock)
	_, hport := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	p := startProxyWith(t, proxyConf{hosts: map[string]string{"t.test": "127.0.0.1"}}, func(o *Options) { o.AccessLog = sink })
	rc := dialRaw(t, p.Addr)
	for i := 0; i < n; i++ {
		// A query and user information: never logged.
		rc.Send("GET http://user:hunter2@t.test:%s/p?token=s3cr3t HTTP/1.1\r\nHost: t.test\r\n\r\n", hport)
		if r, body := rc.Read("GET"); r.StatusCode != 200 || body != "ok" {
			t.Fatalf("GET %d with the log's output stuck: %d %q", i, r.StatusCode, body)
		}
	}
	if q := len(p.alog.q); q > logQueueLen {
		t.Fatalf("%d lines queued, above the queue's %d", q, logQueueLen)
	}
	// One line is in the stuck write; the queue holds logQueueLen more.
	// A request's line is queued after its answer, so the last answers
	// can arrive before their lines: wait until every line is counted.
	dropped := func() float64 {
		var d dto.Metric
		p.Metrics.AccessLogDropped.Write(&d)
		return d.GetCounter().GetValue()
	}
	waitFor(t, func() bool { return dropped() >= n-logQueueLen-1 })
	if d := dropped(); d > n-logQueueLen {
		t.Fatalf("%v lines dropped, want %d or %d", d, n-logQueueLen-1, n-logQueueLen)
	}

	sink.unblock()
	p.FlushAccessLog()
	lines := strings.Count(sink.out.String(), "\n")
	if d := dropped(); float64(lines)+d != n {
		t.Errorf("%d lines written and %v dropped for %d requests", lines, d, n)
	}
	waitFor(t, func() bool { return strings.Contains(p.Log.String(), "access log: lines dropped") })
	for _, out := range []string{sink.out.String(), p.Log.String()} {
		for _, secret := range []string{"hunter2", "s3cr3t", "token="} {
			if strings.Contains(out, secret) {
				t.Errorf("%q reached a log:\n%s", secret, out)
			}
		}
	}
}

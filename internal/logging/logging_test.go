package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

// lockedBuffer is written by the informers' goroutines and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ForbiddenAPIServer is an API server on loopback that refuses every
// request as RBAC does when a service account may not list or watch: the
// failure client-go reports at error level.
func ForbiddenAPIServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",`+
			`"message":"pods is forbidden: User \"system:serviceaccount:egret-system:egret\" cannot list resource \"pods\" in API group \"\" at the cluster scope",`+
			`"reason":"Forbidden","details":{"kind":"pods"},"code":403}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// clientGoFailure runs a real client-go informer against an API server
// that forbids it until client-go has logged its failure into w, and
// returns what was written.
func clientGoFailure(t *testing.T, w *lockedBuffer) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: ForbiddenAPIServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	f.Core().V1().Pods().Informer()
	stop := make(chan struct{})
	f.Start(stop)
	defer func() { close(stop); f.Shutdown() }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if s := w.String(); strings.Contains(s, "is forbidden") && strings.Contains(s, "ERROR") {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("client-go logged no failure in 60s; the log has %q", w.String())
	return ""
}

// TestKlogAndControllerRuntime: plain klog calls (structured and printf
// style, as older client-go code paths make) and controller-runtime's
// logger reach the handler; klog's verbosity maps to slog levels. First in
// the file: controller-runtime keeps the first logger a process sets, as
// egret's commands set one once.
func TestKlogAndControllerRuntime(t *testing.T) {
	t.Cleanup(func() { Route(slog.DiscardHandler) })
	var buf lockedBuffer
	Route(NewHandler(&buf, JSON, slog.LevelInfo))
	klog.ErrorS(errors.New("boom"), "structured failure", "resource", "pods")
	klog.Warningf("printf warning %d", 7)
	klog.V(4).InfoS("verbose detail")
	crlog.Log.WithName("manager").Info("controller-runtime line", "controller", "noproxy")
	klog.FromContext(context.Background()).Info("contextual line")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var got []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		got = append(got, m)
	}
	want := []struct{ msg, level, key, val string }{
		{"structured failure", "ERROR", "err", "boom"},
		{"printf warning 7", "INFO", "", ""},
		{"controller-runtime line", "INFO", "controller", "noproxy"},
		{"contextual line", "INFO", "", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d (V(4) dropped at info): %s", len(got), len(want), buf.String())
	}
	for i, w := range want {
		if got[i]["msg"] != w.msg || got[i]["level"] != w.level || (w.key != "" && got[i][w.key] != w.val) {
			t.Errorf("line %d: %v; want msg %q level %s %s=%s", i, got[i], w.msg, w.level, w.key, w.val)
		}
	}
}

// TestClientGoErrorAsJSON: the line a client-go reflector logs when it
// cannot list (through klog) comes out of the JSON handler as one JSON
// object with the handler's fields — time, level, msg — and the error as
// err, not as klog's text.
func TestClientGoErrorAsJSON(t *testing.T) {
	t.Cleanup(func() { Route(slog.DiscardHandler) })
	var buf lockedBuffer
	Route(NewHandler(&buf, JSON, slog.LevelInfo))
	out := clientGoFailure(t, &buf)
	var failure map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q (%v)", line, err)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line without %q: %s", k, line)
			}
		}
		if m["level"] == "ERROR" && strings.Contains(line, "is forbidden") {
			failure = m
		}
	}
	if failure == nil {
		t.Fatalf("no ERROR line with client-go's failure in %s", out)
	}
	if e, _ := failure["err"].(string); !strings.Contains(e, "is forbidden") {
		t.Errorf("client-go's failure: %v; want level ERROR and the error under err", failure)
	}
	if msg, _ := failure["msg"].(string); !strings.Contains(strings.ToLower(msg), "watch") && !strings.Contains(strings.ToLower(msg), "list") {
		t.Errorf("client-go's failure: msg %q does not say what failed", failure["msg"])
	}
}

// TestClientGoErrorAsText: with --log-format text the same line is slog's
// text, with the same keys.
func TestClientGoErrorAsText(t *testing.T) {
	t.Cleanup(func() { Route(slog.DiscardHandler) })
	var buf lockedBuffer
	Route(NewHandler(&buf, Text, slog.LevelInfo))
	out := clientGoFailure(t, &buf)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=") || !strings.Contains(line, " msg=") {
			t.Errorf("not a slog text line: %q", line)
		}
	}
	if !strings.Contains(out, "level=ERROR") {
		t.Errorf("no level=ERROR line in %q", out)
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]Format{"": JSON, "json": JSON, "JSON": JSON, "text": Text} {
		if f, err := ParseFormat(in); err != nil || f != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, f, err)
		}
	}
	if _, err := ParseFormat("logfmt"); err == nil || !strings.Contains(err.Error(), "want json or text") {
		t.Errorf("ParseFormat(logfmt): %v", err)
	}
	if _, err := ParseLevel("loud"); err == nil || !strings.Contains(err.Error(), "debug, info, warn or error") {
		t.Errorf("ParseLevel(loud): %v", err)
	}
}

package logsink

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

type countingWriter struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	return c.b.Write(p)
}

func (c *countingWriter) snapshot() (string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String(), c.writes
}

func TestBatchesAndFlushes(t *testing.T) {
	out := &countingWriter{}
	w := New(out, 1024, 20*time.Millisecond)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				w.Write([]byte("{\"msg\":\"request\"}\n"))
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(2 * time.Second)
	for {
		s, n := out.snapshot()
		if strings.Count(s, "\n") == 800 {
			if n >= 800/2 {
				t.Errorf("%d writes for 800 lines: not batched", n)
			}
			for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
				if l != `{"msg":"request"}` {
					t.Fatalf("a line was split or mixed: %q", l)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d lines flushed", strings.Count(s, "\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	big := strings.Repeat("x", 2000) + "\n"
	w.Write([]byte(big))
	w.Write([]byte("tail\n"))
	w.Close()
	s, _ := out.snapshot()
	if !strings.HasSuffix(s, big+"tail\n") {
		t.Errorf("Close did not flush in order")
	}
	w.Write([]byte("after\n"))
	if s, _ := out.snapshot(); !strings.HasSuffix(s, "after\n") {
		t.Error("writes after Close must go straight through")
	}
}

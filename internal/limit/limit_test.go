package limit

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBreakerStates(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBreakers(BreakerConfig{Failures: 3, OpenFor: 10 * time.Second, MaxOpenFor: 25 * time.Second})
	b.Now = func() time.Time { return now }
	var changes []string
	b.OnChange = func(key string, from, to State) { changes = append(changes, key+" "+from.String()+">"+to.String()) }
	const k = "api.partner.test:443"
	steps := []struct {
		name    string
		advance time.Duration
		report  string // "ok", "fail" or "" (only Allow)
		allowed bool
	}{
		{"closed-allows", 0, "fail", true},
		{"second-failure", 0, "fail", true},
		{"third-failure-opens", 0, "fail", true},
		{"open-refuses", time.Second, "", false},
		{"still-open", 8 * time.Second, "", false},
		{"half-open-trial", 2 * time.Second, "", true},
		{"second-request-during-trial-refused", 0, "", false},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		err := b.Allow(k)
		if (err == nil) != s.allowed {
			t.Fatalf("%s: Allow = %v, want allowed %v", s.name, err, s.allowed)
		}
		if s.report != "" {
			b.Report(k, s.report == "ok", "connection_refused")
		}
	}
	// The trial fails: open again for twice as long.
	b.Report(k, false, "connection_refused")
	var oe *OpenError
	if err := b.Allow(k); !errors.As(err, &oe) || oe.RetryIn != 20*time.Second || !strings.Contains(oe.Error(), "4 consecutive failures") {
		t.Fatalf("after a failed trial: %v", err)
	}
	now = now.Add(20 * time.Second)
	if err := b.Allow(k); err != nil {
		t.Fatal(err)
	}
	b.Report(k, false, "x") // fails again: 40s capped to 25s
	if err := b.Allow(k); !errors.As(err, &oe) || oe.RetryIn != 25*time.Second {
		t.Fatalf("cap: %v", err)
	}
	now = now.Add(25 * time.Second)
	b.Allow(k)
	b.Report(k, true, "")
	if err := b.Allow(k); err != nil {
		t.Fatalf("closed again: %v", err)
	}
	want := []string{k + " closed>open", k + " open>half_open", k + " half_open>open", k + " open>half_open", k + " half_open>open", k + " open>half_open", k + " half_open>closed"}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Errorf("changes:\n%v\nwant\n%v", changes, want)
	}
	if list, counts := b.Status(); len(list) != 0 || counts != [3]int{1, 0, 0} {
		t.Errorf("status %v %v", list, counts)
	}
}

func TestBreakerSuccessResetsCount(t *testing.T) {
	b := NewBreakers(BreakerConfig{Failures: 2})
	for i := 0; i < 5; i++ {
		b.Report("k", false, "x")
		b.Report("k", true, "")
	}
	if err := b.Allow("k"); err != nil {
		t.Fatal("non-consecutive failures opened the breaker")
	}
}

func TestBreakerBounded(t *testing.T) {
	b := NewBreakers(BreakerConfig{Failures: 1, MaxEntries: 10})
	b.Report("open", false, "x")
	for i := 0; i < 100; i++ {
		k := fmt.Sprint("k", i)
		b.Report(k, false, "x")
		b.Report(k, true, "")
	}
	if n := b.n.Load(); n > 10 {
		t.Errorf("%d entries, bound 10", n)
	}
	if err := b.Allow("open"); err == nil {
		t.Error("an open breaker was dropped to make room")
	}
}

func TestDestinations(t *testing.T) {
	d := &Destinations{
		Default: Limit{MaxConcurrent: 2},
		Rules: []Rule{
			{Suffixes: []string{"slow.test"}, Limit: Limit{Rate: 1, Burst: 2}},
			{Hosts: []string{"free.test"}},
		},
	}
	if !d.Enabled() {
		t.Fatal("not enabled")
	}
	// Rate: burst 2 then refused.
	for i := 0; i < 2; i++ {
		if _, err := d.Acquire("a.slow.test"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	_, err := d.Acquire("a.slow.test")
	var le *Error
	if !errors.As(err, &le) || le.Kind != KindRate {
		t.Fatalf("third request: %v", err)
	}
	// Another host has its own bucket.
	if _, err := d.Acquire("slow.test"); err != nil {
		t.Fatal(err)
	}
	// Concurrency by default.
	r1, _ := d.Acquire("x.test")
	r2, _ := d.Acquire("x.test")
	if _, err := d.Acquire("x.test"); !errors.As(err, &le) || le.Kind != KindDestConcurrency {
		t.Fatalf("third concurrent: %v", err)
	}
	r1()
	r1() // twice is harmless
	if r, err := d.Acquire("x.test"); err != nil || r == nil {
		t.Fatalf("after a release: %v", err)
	}
	r2()
	// No limit: nothing tracked.
	for i := 0; i < 100; i++ {
		if r, err := d.Acquire("free.test"); err != nil || r != nil {
			t.Fatal("a host without limits was limited")
		}
	}
	if (&Destinations{}).Enabled() || (*Destinations)(nil).Enabled() {
		t.Error("empty limits enabled")
	}
}

func TestDestinationsBounded(t *testing.T) {
	d := &Destinations{Default: Limit{Rate: 1000}, MaxEntries: 50}
	for i := 0; i < 1000; i++ {
		d.Acquire(fmt.Sprint("h", i, ".test"))
	}
	if len(d.m) > 50 {
		t.Errorf("%d entries, bound 50", len(d.m))
	}
}

func TestClientsAndCounter(t *testing.T) {
	c := &Clients{MaxConcurrent: 2}
	var rel []func()
	for i := 0; i < 2; i++ {
		r, err := c.Acquire("10.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		rel = append(rel, r)
	}
	if _, err := c.Acquire("10.0.0.1"); err == nil || !strings.Contains(err.Error(), "client 10.0.0.1") {
		t.Fatalf("third: %v", err)
	}
	if _, err := c.Acquire("10.0.0.2"); err != nil {
		t.Fatal("another client was limited")
	}
	for _, r := range rel {
		r()
		r()
	}
	if c.InFlight("10.0.0.1") != 0 {
		t.Error("release did not count down")
	}
	var wg sync.WaitGroup
	ctr := &Counter{Max: 10}
	var mu sync.Mutex
	ok := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ctr.Acquire(); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 10 || ctr.Load() != 10 {
		t.Errorf("%d admitted, want 10", ok)
	}
	if r, err := (*Counter)(nil).Acquire(); r != nil || err != nil {
		t.Error("nil counter limits")
	}
}

func BenchmarkBreakerHealthy(b *testing.B) {
	br := NewBreakers(BreakerConfig{})
	br.Report("other:443", false, "x")
	b.ReportAllocs()
	for b.Loop() {
		if br.Allow("api.partner.test:443") == nil {
			br.Report("api.partner.test:443", true, "")
		}
	}
}

func BenchmarkDestinationsAcquire(b *testing.B) {
	d := &Destinations{Default: Limit{Rate: 1e9, Burst: 1 << 30, MaxConcurrent: 1 << 30}}
	b.ReportAllocs()
	for b.Loop() {
		r, err := d.Acquire("api.partner.test")
		if err != nil {
			b.Fatal(err)
		}
		r()
	}
}

func BenchmarkClientsAcquire(b *testing.B) {
	c := &Clients{MaxConcurrent: 100}
	b.ReportAllocs()
	for b.Loop() {
		r, _ := c.Acquire("10.1.2.3")
		r()
	}
}

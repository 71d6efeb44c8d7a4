package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/proxystatus"
)

func TestInsightsBounded(t *testing.T) {
	var in insights
	now := time.Now()
	// One heavy destination among many light ones survives eviction.
	in.record(&event{dest: "heavy.test:443", up: 1 << 30}, now)
	for i := 0; i < 5000; i++ {
		in.record(&event{dest: fmt.Sprintf("light-%d.test:443", i), down: 10}, now)
	}
	in.record(&event{dest: strings.Repeat("x", 70000)}, now)
	if len(in.top) > topSize {
		t.Errorf("%d destinations tracked, bound %d", len(in.top), topSize)
	}
	for k := range in.top {
		if len(k) > maxDestLen {
			t.Errorf("a %d-byte key was kept", len(k))
		}
	}
	if top := in.Top(3); len(top) != 3 || top[0].Dest != "heavy.test:443" || top[0].Bytes != 1<<30 {
		t.Errorf("top: %+v", top)
	}
	for i := 0; i < 60; i++ {
		in.record(&event{dest: "d.test:1", status: 403, err: &proxystatus.Error{Type: proxystatus.HTTPRequestDenied, Detail: fmt.Sprint(i)}}, now)
	}
	r := in.Recent()
	if len(r) != recentSize || r[0].Detail != "59" || !r[0].Denied || r[len(r)-1].Detail != "10" {
		t.Errorf("recent: %d entries, first %+v", len(r), r[0])
	}
}

func BenchmarkInsightsRecord(b *testing.B) {
	var in insights
	ev := &event{dest: "api.partner.test:443", up: 100, down: 1000}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		in.record(ev, now)
	}
}

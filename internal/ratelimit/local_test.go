package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"egret.io/egret/internal/limit"
)

func TestLocal(t *testing.T) {
	ctx := context.Background()
	var lo Local
	t.Run("rate", func(t *testing.T) {
		l := Limit{Requests: 3, Per: time.Hour}
		for i := range 3 {
			if _, err := lo.Acquire(ctx, "ns/rate", l); err != nil {
				t.Fatalf("request %d refused: %v", i, err)
			}
		}
		_, err := lo.Acquire(ctx, "ns/rate", l)
		var le *limit.Error
		if !errors.As(err, &le) || le.Kind != KindRate || le.Limit != "3/hour" {
			t.Fatalf("4th request: %v", err)
		}
		if _, err := lo.Acquire(ctx, "ns/other", l); err != nil {
			t.Errorf("another workload shares the bucket: %v", err)
		}
	})
	t.Run("concurrency-and-a-limit-change", func(t *testing.T) {
		l := Limit{MaxConcurrent: 2}
		r1, err1 := lo.Acquire(ctx, "ns/c", l)
		r2, err2 := lo.Acquire(ctx, "ns/c", l)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if _, err := lo.Acquire(ctx, "ns/c", l); err == nil {
			t.Fatal("third in flight admitted")
		}
		// The policy raises the limit: the two in flight still count, and
		// their releases reach the new counter.
		l3 := Limit{MaxConcurrent: 3}
		r3, err := lo.Acquire(ctx, "ns/c", l3)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lo.Acquire(ctx, "ns/c", l3); err == nil {
			t.Fatal("fourth in flight admitted")
		}
		r1()
		r1() // twice is once
		r2()
		r3()
		if n := lo.InFlight("ns/c"); n != 0 {
			t.Errorf("in flight after release: %d", n)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		small := Local{MaxKeys: 10}
		for i := range 100 {
			small.Acquire(ctx, fmt.Sprint("ns/", i), Limit{Requests: 100})
		}
		if small.Len() > 10 {
			t.Errorf("tracks %d keys, bound 10", small.Len())
		}
	})
	if rel, err := lo.Acquire(ctx, "ns/none", Limit{}); rel != nil || err != nil {
		t.Error("no limit took a slot")
	}
}

package identity

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// reviewer is a TokenReview API: tokens "good-<pod>" are the pod's (until
// revoked), anything else is rejected; down makes every review fail.
type reviewer struct {
	mu      sync.Mutex
	revoked map[string]bool
	down    atomic.Bool
	calls   atomic.Int32
}

func (r *reviewer) tokens(t *testing.T, now func() time.Time) *Tokens {
	t.Helper()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r.calls.Add(1)
		if r.down.Load() {
			return true, nil, errors.New("connection refused")
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenReview).DeepCopy()
		pod, ok := strings.CutPrefix(tr.Spec.Token, "good-")
		r.mu.Lock()
		ok = ok && !r.revoked[tr.Spec.Token]
		r.mu.Unlock()
		if ok {
			tr.Status = authv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
				User: authv1.UserInfo{Username: "system:serviceaccount:ns:sa", Extra: map[string]authv1.ExtraValue{extraPodName: {pod}, extraPodUID: {"uid-" + pod}}}}
		} else {
			tr.Status = authv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	return &Tokens{Reviews: cs.AuthenticationV1().TokenReviews(), Now: now}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var client = netip.MustParseAddr("10.0.0.1")

// TestTokenReReviewed: an accepted token is trusted for MaxTTL, then
// reviewed again, so a revoked token stops working within a minute (it
// worked until its own expiry, up to an hour, before).
func TestTokenReReviewed(t *testing.T) {
	r := &reviewer{revoked: map[string]bool{}}
	clk := &clock{t: time.Unix(1e9, 0)}
	ts := r.tokens(t, clk.now)
	ctx := context.Background()
	if tok, err := ts.Verify(ctx, client, "good-one"); err != nil || tok.Pod != "one" {
		t.Fatalf("%+v %v", tok, err)
	}
	clk.add(30 * time.Second)
	if _, err := ts.Verify(ctx, client, "good-one"); err != nil || r.calls.Load() != 1 {
		t.Fatalf("within MaxTTL: %v, %d reviews", err, r.calls.Load())
	}
	r.mu.Lock()
	r.revoked["good-one"] = true
	r.mu.Unlock()
	clk.add(31 * time.Second)
	if _, err := ts.Verify(ctx, client, "good-one"); !errors.Is(err, ErrRejected) {
		t.Fatalf("a revoked token still works after %s: %v (%d reviews)", DefaultMaxTTL, err, r.calls.Load())
	}
	ts.Forget("good-two")
}

// TestFailedReviewBudget: random bearer strings from one client cost at
// most its budget of reviews; another client's real token is still
// reviewed; the budget refills.
func TestFailedReviewBudget(t *testing.T) {
	r := &reviewer{}
	clk := &clock{t: time.Unix(1e9, 0)}
	ts := r.tokens(t, clk.now)
	ctx := context.Background()
	for i := range 100 {
		_, err := ts.Verify(ctx, client, fmt.Sprintf("random-%d", i))
		if !errors.Is(err, ErrRejected) {
			t.Fatalf("random token %d: %v", i, err)
		}
	}
	if n := r.calls.Load(); n != DefaultFailedReviews {
		t.Errorf("100 random tokens from one client cost %d reviews, want %d", n, DefaultFailedReviews)
	}
	if _, err := ts.Verify(ctx, client, "random-x"); !errors.Is(err, ErrBudget) {
		t.Errorf("over budget: %v", err)
	}
	other := netip.MustParseAddr("10.0.0.2")
	if tok, err := ts.Verify(ctx, other, "good-two"); err != nil || tok.Pod != "two" {
		t.Errorf("another client's token: %+v %v", tok, err)
	}
	clk.add(DefaultFailedRefill)
	before := r.calls.Load()
	if tok, err := ts.Verify(ctx, client, "good-one"); err != nil || tok.Pod != "one" || r.calls.Load() != before+1 {
		t.Errorf("after the refill: %+v %v", tok, err)
	}
}

// TestTokensWhileAPIServerDown is the documented behaviour
// (docs/policy.md, "While the API server is unreachable"): cached
// acceptances hold until their MaxTTL, then the token is unavailable (the
// address decides); a new token is unavailable; no client's budget is
// spent by the outage.
func TestTokensWhileAPIServerDown(t *testing.T) {
	r := &reviewer{}
	clk := &clock{t: time.Unix(1e9, 0)}
	ts := r.tokens(t, clk.now)
	ctx := context.Background()
	if _, err := ts.Verify(ctx, client, "good-one"); err != nil {
		t.Fatal(err)
	}
	r.down.Store(true)
	if tok, err := ts.Verify(ctx, client, "good-one"); err != nil || tok.Pod != "one" {
		t.Errorf("cached, during the outage: %+v %v", tok, err)
	}
	for i := range 3 * DefaultFailedReviews {
		if _, err := ts.Verify(ctx, client, fmt.Sprintf("good-new%d", i)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("new token during the outage: %v", err)
		}
	}
	clk.add(DefaultMaxTTL)
	if _, err := ts.Verify(ctx, client, "good-one"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("after MaxTTL during the outage: %v", err)
	}
	r.down.Store(false)
	if tok, err := ts.Verify(ctx, client, "good-new0"); err != nil || tok.Pod != "new0" {
		t.Errorf("after the outage (no budget spent by it): %+v %v", tok, err)
	}
}

package identity

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// DefaultAudience is the audience of the projected service-account tokens
// egret sidecars present to the gateway.
const DefaultAudience = "egret"

// Defaults for Tokens fields left zero.
const (
	DefaultMaxEntries  = 10000
	DefaultMaxInFlight = 32
	// DefaultNegativeTTL is how long a rejected token stays rejected
	// without another review.
	DefaultNegativeTTL = 10 * time.Second
	// DefaultReviewTimeout bounds one TokenReview.
	DefaultReviewTimeout = 5 * time.Second
	// DefaultMaxTTL is how long an accepted token is trusted before it is
	// reviewed again (a token revoked, or whose pod is gone, stops
	// working within it).
	DefaultMaxTTL = time.Minute
	// DefaultFailedReviews is each client's budget of failed reviews
	// (tokens the API server rejected): a burst of this many, refilled at one
	// every DefaultFailedRefill. Beyond it the client's tokens that are
	// not cached are refused without a review.
	DefaultFailedReviews = 8
	DefaultFailedRefill  = 5 * time.Second
	// maxClients bounds the clients whose failed reviews are counted.
	maxClients = 10000
)

// Extra keys of a pod-bound service-account token's user info.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// Token is who a verified service-account token says the client is.
type Token struct {
	Namespace      string
	ServiceAccount string
	// Pod and PodUID name the pod the token is bound to.
	Pod, PodUID string
}

// ErrRejected is a token the API server does not accept for the audience,
// or one bound to no pod. The client claimed an identity it cannot prove:
// it is refused, not treated as anonymous.
var ErrRejected = errors.New("service-account token rejected")

// ErrUnavailable is a token that could not be reviewed now (the API server
// failed or too many reviews are in flight). The caller may fall back to
// the client's address.
var ErrUnavailable = errors.New("service-account token not reviewed")

// Tokens verifies service-account tokens with TokenReview. Each acceptance
// is cached for MaxTTL at most (then reviewed again), or until the token
// expires if sooner; a rejection for NegativeTTL; in a cache of at most
// MaxEntries tokens. Each client has a budget of rejected reviews, beyond
// which its tokens that are not cached are refused unreviewed (ErrBudget);
// an API server that cannot answer spends no budget; at most MaxInFlight reviews run at once,
// and concurrent verifications of one token share a review. It is safe for
// concurrent use. No token reaches an error or a log.
type Tokens struct {
	// Reviews creates TokenReviews (a clientset's
	// AuthenticationV1().TokenReviews()); required.
	Reviews authclient.TokenReviewInterface
	// Audience is the audience a token must have; "" means
	// DefaultAudience.
	Audience string
	// MaxEntries bounds the cache; 0 means DefaultMaxEntries.
	MaxEntries int
	// MaxInFlight bounds the reviews in flight; 0 means
	// DefaultMaxInFlight.
	MaxInFlight int
	// NegativeTTL is how long a rejection is cached; 0 means
	// DefaultNegativeTTL.
	NegativeTTL time.Duration
	// MaxTTL is how long an acceptance is cached at most (the token's
	// expiry may end it sooner); 0 means DefaultMaxTTL.
	MaxTTL time.Duration
	// FailedReviews and FailedRefill are each client's budget of failed
	// reviews; 0 means DefaultFailedReviews and DefaultFailedRefill.
	FailedReviews int
	FailedRefill  time.Duration
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// Result, when set, is told each review's result: "ok", "rejected" or
	// "error", and "budget" for a token refused unreviewed (ErrBudget).
	Result func(result string)

	once    sync.Once
	mu      sync.Mutex
	entries map[string]*tokenEntry
	flight  map[string]*reviewCall
	sem     chan struct{}
	clients map[netip.Addr]*failBudget
}

// failBudget is a client's failed reviews: a token bucket.
type failBudget struct {
	left float64
	at   time.Time
}

type tokenEntry struct {
	tok   Token
	err   error
	until time.Time
}

type reviewCall struct {
	done chan struct{}
	tok  Token
	err  error
}

func (ts *Tokens) init() {
	ts.once.Do(func() {
		if ts.Audience == "" {
			ts.Audience = DefaultAudience
		}
		if ts.MaxEntries <= 0 {
			ts.MaxEntries = DefaultMaxEntries
		}
		if ts.MaxInFlight <= 0 {
			ts.MaxInFlight = DefaultMaxInFlight
		}
		if ts.NegativeTTL <= 0 {
			ts.NegativeTTL = DefaultNegativeTTL
		}
		if ts.MaxTTL <= 0 {
			ts.MaxTTL = DefaultMaxTTL
		}
		if ts.FailedReviews <= 0 {
			ts.FailedReviews = DefaultFailedReviews
		}
		if ts.FailedRefill <= 0 {
			ts.FailedRefill = DefaultFailedRefill
		}
		ts.clients = map[netip.Addr]*failBudget{}
		if ts.Now == nil {
			ts.Now = time.Now
		}
		ts.entries = map[string]*tokenEntry{}
		ts.flight = map[string]*reviewCall{}
		ts.sem = make(chan struct{}, ts.MaxInFlight)
	})
}

// Len returns the number of cached answers.
func (ts *Tokens) Len() int {
	ts.init()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.entries)
}

// ErrBudget is a client whose failed reviews used up its budget: its
// tokens that are not cached are refused without a review, so that random
// bearer strings cannot use up the reviews other clients need.
var ErrBudget = fmt.Errorf("%w: too many failed token reviews from this client, try again later", ErrRejected)

// Forget drops the cached answer for token (its pod is gone): the next
// request with it is reviewed again.
func (ts *Tokens) Forget(token string) {
	ts.init()
	ts.mu.Lock()
	delete(ts.entries, token)
	ts.mu.Unlock()
}

// Verify returns the identity of token presented by client. Errors wrap
// ErrRejected or ErrUnavailable.
func (ts *Tokens) Verify(ctx context.Context, client netip.Addr, token string) (Token, error) {
	ts.init()
	now := ts.Now()
	ts.mu.Lock()
	if e, ok := ts.entries[token]; ok {
		if now.Before(e.until) {
			ts.mu.Unlock()
			return e.tok, e.err
		}
		delete(ts.entries, token)
	}
	if !ts.budgetLeft(client, now) {
		ts.mu.Unlock()
		if ts.Result != nil {
			ts.Result("budget")
		}
		return Token{}, ErrBudget
	}
	if c, ok := ts.flight[token]; ok {
		ts.mu.Unlock()
		select {
		case <-c.done:
			return c.tok, c.err
		case <-ctx.Done():
			return Token{}, fmt.Errorf("%w: %v", ErrUnavailable, context.Cause(ctx))
		}
	}
	select {
	case ts.sem <- struct{}{}:
	default:
		ts.mu.Unlock()
		return Token{}, fmt.Errorf("%w: %d token reviews in flight", ErrUnavailable, ts.MaxInFlight)
	}
	c := &reviewCall{done: make(chan struct{})}
	ts.flight[token] = c
	ts.mu.Unlock()

	tok, until, err := ts.review(ctx, token)
	<-ts.sem
	if ts.Result != nil {
		switch {
		case err == nil:
			ts.Result("ok")
		case errors.Is(err, ErrRejected):
			ts.Result("rejected")
		default:
			ts.Result("error")
		}
	}
	c.tok, c.err = tok, err
	ts.mu.Lock()
	if errors.Is(err, ErrRejected) {
		ts.spend(client, now) // not an outage: that is no client's doing
	}
	delete(ts.flight, token)
	switch {
	case err == nil:
		ts.store(token, &tokenEntry{tok: tok, until: until}, now)
	case errors.Is(err, ErrRejected):
		ts.store(token, &tokenEntry{err: err, until: now.Add(ts.NegativeTTL)}, now)
	}
	ts.mu.Unlock()
	close(c.done)
	return tok, err
}

// budgetLeft reports whether client may have a review fail; ts.mu is held.
func (ts *Tokens) budgetLeft(client netip.Addr, now time.Time) bool {
	b := ts.clients[client]
	if b == nil {
		return true
	}
	b.left = min(float64(ts.FailedReviews), b.left+float64(now.Sub(b.at))/float64(ts.FailedRefill))
	b.at = now
	return b.left >= 1
}

// spend counts a failed review of client; ts.mu is held.
func (ts *Tokens) spend(client netip.Addr, now time.Time) {
	b := ts.clients[client]
	if b == nil {
		if len(ts.clients) >= maxClients {
			for k, o := range ts.clients {
				// Those refilled to the full budget are as good as new.
				if float64(now.Sub(o.at)) >= float64(ts.FailedReviews)*float64(ts.FailedRefill) {
					delete(ts.clients, k)
				}
			}
			for k := range ts.clients {
				if len(ts.clients) < maxClients-maxClients/8 {
					break
				}
				delete(ts.clients, k)
			}
		}
		b = &failBudget{left: float64(ts.FailedReviews), at: now}
		ts.clients[client] = b
	}
	ts.budgetLeft(client, now)
	b.left--
}

// store caches e, making room first; ts.mu is held.
func (ts *Tokens) store(token string, e *tokenEntry, now time.Time) {
	if !now.Before(e.until) {
		return
	}
	if len(ts.entries) >= ts.MaxEntries {
		for k, old := range ts.entries {
			if !now.Before(old.until) {
				delete(ts.entries, k)
			}
		}
		// Still full: drop an eighth, in the map's random order.
		for k := range ts.entries {
			if len(ts.entries) < ts.MaxEntries-ts.MaxEntries/8 {
				break
			}
			delete(ts.entries, k)
		}
	}
	ts.entries[token] = e
}

// review asks the API server about token.
func (ts *Tokens) review(ctx context.Context, token string) (Token, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultReviewTimeout)
	defer cancel()
	tr, err := ts.Reviews.Create(ctx, &authv1.TokenReview{Spec: authv1.TokenReviewSpec{
		Token: token, Audiences: []string{ts.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		// The API's error never holds the token (it is in the body we
		// sent, not in the answer).
		return Token{}, time.Time{}, fmt.Errorf("%w: TokenReview: %v", ErrUnavailable, err)
	}
	st := tr.Status
	if !st.Authenticated {
		why := "not authenticated"
		if st.Error != "" {
			why = oneLine(st.Error)
		}
		return Token{}, time.Time{}, fmt.Errorf("%w: %s", ErrRejected, why)
	}
	if !slices.Contains(st.Audiences, ts.Audience) {
		return Token{}, time.Time{}, fmt.Errorf("%w: not issued for audience %q", ErrRejected, ts.Audience)
	}
	ns, sa, ok := serviceAccount(st.User.Username)
	if !ok {
		return Token{}, time.Time{}, fmt.Errorf("%w: user %q is not a service account", ErrRejected, oneLine(st.User.Username))
	}
	pod, uid := first(st.User.Extra[extraPodName]), first(st.User.Extra[extraPodUID])
	if pod == "" || uid == "" {
		return Token{}, time.Time{}, fmt.Errorf("%w: the token of service account %s/%s is bound to no pod (mount a projected token)", ErrRejected, ns, sa)
	}
	until := ts.Now().Add(ts.MaxTTL)
	if exp, ok := expiry(token); ok && exp.Before(until) {
		until = exp
	}
	return Token{Namespace: intern(ns), ServiceAccount: intern(sa), Pod: pod, PodUID: uid}, until, nil
}

// serviceAccount splits "system:serviceaccount:<ns>:<name>".
func serviceAccount(user string) (ns, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, ":")
	return ns, name, ok && ns != "" && name != ""
}

func first(v authv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// expiry reads the exp claim of a JWT the API server has just accepted
// (so its claims are the issuer's): the cache keeps the answer until then.
func expiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

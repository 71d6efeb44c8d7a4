package ratelimit

import (
	"context"
	"fmt"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"egret.io/egret/internal/limit"
)

// Defaults for Service fields left zero.
const (
	DefaultDomain  = "egret"
	DefaultTimeout = 250 * time.Millisecond
	// DescriptorKey is the descriptor entry egret sends: its value is the
	// workload ("namespace/policy").
	DescriptorKey = "egret_workload"
)

// Results of a call to the service, for metrics.
const (
	ResultOK        = "ok"
	ResultOverLimit = "over_limit"
	ResultError     = "error"
)

// Service enforces the rate of each workload through an Envoy rate-limit
// service, shared by every gateway replica that uses it; concurrency is
// counted locally. It is safe for concurrent use.
type Service struct {
	// Client calls the service; see Dial.
	Client rls.RateLimitServiceClient
	// Domain is the service's configuration domain; "" means
	// DefaultDomain.
	Domain string
	// Timeout bounds one call; zero means DefaultTimeout.
	Timeout time.Duration
	// FailClosed refuses a request when the service cannot answer;
	// otherwise (the default) it is let through.
	FailClosed bool
	// Result, when set, is called with each call's result (ResultOK,
	// ResultOverLimit, ResultError).
	Result func(result string)

	local Local // concurrency
}

// Dial connects to a rate-limit service at addr (host:port, plain gRPC:
// it is cluster-internal, like Envoy's default). The connection is made
// lazily and re-made after failures.
func Dial(addr string) (*grpc.ClientConn, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("rate-limit service %s: %w", addr, err)
	}
	return cc, nil
}

// Acquire admits one request or tunnel of key under l, or returns a
// *limit.Error: over the rate (as the service says), over the concurrency,
// or (failing closed) the service unavailable.
func (s *Service) Acquire(ctx context.Context, key string, l Limit) (release func(), err error) {
	if l.MaxConcurrent > 0 {
		release, err = s.local.Acquire(ctx, key, Limit{MaxConcurrent: l.MaxConcurrent})
		if err != nil {
			return nil, err
		}
	}
	if l.Requests <= 0 {
		return release, nil
	}
	if err := s.hit(ctx, key, l); err != nil {
		if release != nil {
			release()
		}
		return nil, err
	}
	return release, nil
}

func (s *Service) hit(ctx context.Context, key string, l Limit) error {
	d := s.Timeout
	if d <= 0 {
		d = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	domain := s.Domain
	if domain == "" {
		domain = DefaultDomain
	}
	unit := typev3.RateLimitUnit_SECOND
	switch l.per() {
	case time.Minute:
		unit = typev3.RateLimitUnit_MINUTE
	case time.Hour:
		unit = typev3.RateLimitUnit_HOUR
	}
	resp, err := s.Client.ShouldRateLimit(ctx, &rls.RateLimitRequest{
		Domain: domain,
		Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: DescriptorKey, Value: key}},
			Limit:   &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(l.Requests), Unit: unit},
		}},
		HitsAddend: 1,
	})
	switch {
	case err != nil:
		s.result(ResultError)
		if !s.FailClosed {
			return nil
		}
		return &limit.Error{Kind: KindService, Key: key, Limit: "the shared rate-limit service did not answer (failing closed)"}
	case resp.GetOverallCode() == rls.RateLimitResponse_OVER_LIMIT:
		s.result(ResultOverLimit)
		return &limit.Error{Kind: KindRate, Key: key, Limit: l.String() + " across the gateway replicas"}
	}
	s.result(ResultOK)
	return nil
}

func (s *Service) result(r string) {
	if s.Result != nil {
		s.Result(r)
	}
}

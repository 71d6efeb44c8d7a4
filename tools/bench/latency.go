package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// The latency test: keep-alive GETs of the small body at a fixed rate
// (open loop), the same rate for every proxy — by default half the
// keep-alive req/s egret reached in the same round's http test ("50 % of
// egret's saturation"; -latency-rate sets one). Requests are scheduled at
// start + i/rate whether or not the earlier ones were answered, and each
// one's latency runs from its scheduled time to the end of its response:
// a proxy that stalls pays for every request that waited behind the stall
// (no coordinated omission). The requests go over -c keep-alive
// connections, each taking the next scheduled request when it is free.

// latencyShare is the share of egret's keep-alive req/s the latency test
// offers when -latency-rate is not set.
const latencyShare = 0.5

// Metrics of the latency test besides mP50, mP99 and mOps (what was
// completed per second).
const (
	mOffered = "offered_per_s" // the rate the requests were scheduled at
	mP999    = "p999_ms"
)

// latencyTick is how often the scheduler releases the requests due: a
// request's latency counts from its own scheduled time, so the tick only
// bounds how late a request can leave (it is inside the measured latency).
const latencyTick = 200 * time.Microsecond

// runLatency offers rate keep-alive GETs per second through t for d, over
// conns connections.
func runLatency(ctx context.Context, t target, conns int, rate float64, d time.Duration) Result {
	var r Result
	if rate <= 0 {
		r.Errors, r.FirstError = 1, "no rate: run the http test with egret first in the round, or set -latency-rate"
		return r
	}
	u := "http://" + t.Host + "/small"
	total := int(rate * d.Seconds())
	due := make(chan time.Time, total)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var s opStats
	var wg sync.WaitGroup
	lat := make([][]time.Duration, conns)
	for i := range conns {
		wg.Go(func() {
			tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true, ResponseHeaderTimeout: 10 * time.Second}
			if t.Proxy != "" {
				pu, _ := url.Parse(t.Proxy)
				tr.Proxy = http.ProxyURL(pu)
			}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			mine := make([]time.Duration, 0, total/conns+1)
			for at := range due {
				resp, err := cl.Get(u)
				if err == nil {
					n, rerr := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					err = wantBody(resp, n, rerr, smallBody)
				}
				if err != nil {
					s.fail(err)
					continue
				}
				s.ops.Add(1)
				mine = append(mine, time.Since(at))
			}
			lat[i] = mine
		})
	}

	start := time.Now()
	tick := time.NewTicker(latencyTick)
	sent := 0
	for sent < total && ctx.Err() == nil {
		n := min(total, int(time.Since(start).Seconds()*rate)+1)
		for ; sent < n; sent++ {
			due <- start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	tick.Stop()
	close(due)
	wg.Wait()
	elapsed := time.Since(start)

	for _, l := range lat {
		s.lat = append(s.lat, l...)
	}
	s.result(&r, elapsed) // sorts s.lat
	r.P999ms = quantileMs(s.lat, 0.999)
	r.Offered = rate
	if r.Ops == 0 && r.Errors == 0 {
		r.Errors, r.FirstError = 1, "no request completed"
	}
	return r
}

// latencyRate is the rate of the latency test in the round that measured
// egret's keep-alive req/s as saturation (0: not measured).
func (r *runner) latencyRate(saturation float64) float64 {
	if r.opt.latencyRate > 0 {
		return r.opt.latencyRate
	}
	return saturation * latencyShare
}

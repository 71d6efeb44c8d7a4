package proxy

import (
	"sort"
	"strings"
	"sync"
	"time"
)

// insights keeps what the status page shows about traffic: the top
// destinations by bytes (a bounded space-saving count: a new destination
// replaces the smallest and inherits its count, so heavy hitters are never
// lost) and the most recent denials and errors. One short lock per finished
// request or tunnel; nothing per byte.
type insights struct {
	mu     sync.Mutex
	top    map[string]*destStat
	recent [recentSize]Recent
	next   int
	n      int
}

const (
	topSize    = 256
	recentSize = 50
	maxDestLen = 260
)

type destStat struct {
	Bytes    int64
	Requests int64
	Errors   int64
	Over     int64 // count inherited on eviction (upper bound of the error)
}

// DestTraffic is one line of the top destinations.
type DestTraffic struct {
	Dest     string `json:"dest"`
	Bytes    int64  `json:"bytes"`
	Requests int64  `json:"requests"`
	Errors   int64  `json:"errors"`
}

// Recent is a denied or failed request or tunnel.
type Recent struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Client string    `json:"client"`
	Dest   string    `json:"dest"`
	Status int       `json:"status"`
	Error  string    `json:"error"`
	Detail string    `json:"detail"`
	Denied bool      `json:"denied"`
}

func (in *insights) record(ev *event, now time.Time) {
	dest := ev.dest
	if dest == "" {
		return
	}
	if len(dest) > maxDestLen {
		dest = dest[:maxDestLen] // a malformed target cannot grow the table
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.top == nil {
		in.top = make(map[string]*destStat, topSize)
	}
	st := in.top[dest]
	if st == nil {
		if len(in.top) >= topSize {
			var minK string
			var minV *destStat
			for k, v := range in.top {
				if minV == nil || v.Bytes < minV.Bytes {
					minK, minV = k, v
				}
			}
			delete(in.top, minK)
			st = &destStat{Bytes: minV.Bytes, Over: minV.Bytes}
		} else {
			st = &destStat{}
		}
		in.top[dest] = st
	}
	st.Bytes += ev.up + ev.down
	st.Requests++
	if ev.err != nil {
		st.Errors++
		r := &in.recent[in.next]
		*r = Recent{Time: now, Kind: ev.kind, Client: ev.client, Dest: dest, Status: ev.status,
			Error: string(ev.err.Type), Detail: ev.err.Detail, Denied: ev.status == 403}
		if ev.err.Upstream != "" && !strings.Contains(r.Detail, ev.err.Upstream) {
			r.Detail = "via " + ev.err.Upstream + ": " + r.Detail
		}
		in.next = (in.next + 1) % recentSize
		in.n = min(in.n+1, recentSize)
	}
}

// Top returns the n destinations with the most bytes.
func (in *insights) Top(n int) []DestTraffic {
	in.mu.Lock()
	out := make([]DestTraffic, 0, len(in.top))
	for k, v := range in.top {
		out = append(out, DestTraffic{Dest: k, Bytes: v.Bytes - v.Over, Requests: v.Requests, Errors: v.Errors})
	}
	in.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Dest < out[j].Dest
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// Recent returns the latest denials and errors, newest first.
func (in *insights) Recent() []Recent {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]Recent, 0, in.n)
	for i := 1; i <= in.n; i++ {
		out = append(out, in.recent[(in.next-i+recentSize)%recentSize])
	}
	return out
}

// Traffic returns the top n destinations by bytes and the recent denials
// and errors, for the status page.
func (s *Server) Traffic(n int) ([]DestTraffic, []Recent) {
	return s.insights.Top(n), s.insights.Recent()
}

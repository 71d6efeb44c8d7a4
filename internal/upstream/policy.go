package upstream

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Policy orders a pool's members for one attempt.
type Policy uint8

// Policies. Every policy honours weights.
const (
	// RoundRobin takes members in turn, in a smooth weighted order.
	RoundRobin Policy = iota + 1
	// Random picks the first member at random, in proportion to weights.
	Random
	// LeastConn picks the member with the fewest connections in flight
	// per unit of weight.
	LeastConn
	// Sticky sends every destination host to the same member while it is
	// healthy (weighted rendezvous hashing), so a partner always sees the
	// same exit address; when that member is down, its destinations spread
	// over the others and come back when it recovers.
	Sticky
)

// ParsePolicy reads round_robin (default for ""), random, least_conn or
// sticky; '-' may replace '_'.
func ParsePolicy(s string) (Policy, error) {
	switch strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_") {
	case "", "round_robin", "roundrobin":
		return RoundRobin, nil
	case "random":
		return Random, nil
	case "least_conn", "least_connections":
		return LeastConn, nil
	case "sticky", "sticky_destination":
		return Sticky, nil
	}
	return 0, fmt.Errorf("unknown pool policy %q (want round_robin, random, least_conn or sticky)", s)
}

func (p Policy) String() string {
	switch p {
	case RoundRobin:
		return "round_robin"
	case Random:
		return "random"
	case LeastConn:
		return "least_conn"
	case Sticky:
		return "sticky"
	default:
		return "unknown(" + strconv.Itoa(int(p)) + ")"
	}
}

// group is the primaries or the backups of a snapshot.
type group struct {
	ms    []*Member
	sched []uint16 // smooth weighted round-robin order of indexes into ms
	total int      // sum of weights
	seeds []uint64 // per member: FNV-1a state after its name, for Sticky
}

// snapshot is an immutable member list.
type snapshot struct {
	all    []*Member
	groups [2]group // primaries, backups
}

func newSnapshot(ms []*Member) *snapshot {
	s := &snapshot{all: ms}
	for _, m := range ms {
		if m.Weight < 1 {
			m.Weight = 1
		}
		gi := 0
		if m.Backup {
			gi = 1
		}
		s.groups[gi].ms = append(s.groups[gi].ms, m)
	}
	for gi := range s.groups {
		g := &s.groups[gi]
		cur := make([]int, len(g.ms))
		for _, m := range g.ms {
			g.total += m.Weight
		}
		// Smooth weighted round-robin: each step every member gains its
		// weight and the richest is chosen and pays the total.
		for step := 0; step < g.total; step++ {
			best := 0
			for i, m := range g.ms {
				cur[i] += m.Weight
				if cur[i] > cur[best] {
					best = i
				}
			}
			cur[best] -= g.total
			g.sched = append(g.sched, uint16(best))
		}
		for _, m := range g.ms {
			g.seeds = append(g.seeds, fnvAdd(fnvOffset, m.Name+"\x00"))
		}
	}
	return s
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// mix is splitmix64's finaliser: it spreads FNV's output over all bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// appendOrdered appends g's healthy members in policy order.
func (g *group) appendOrdered(dst []*Member, pol Policy, key string, ctr uint64, now time.Time) []*Member {
	n := len(g.ms)
	if n == 0 {
		return dst
	}
	n0 := len(dst)
	start := 0
	switch pol {
	case Random:
		r := rand.IntN(g.total)
		for i, m := range g.ms {
			if r < m.Weight {
				start = i
				break
			}
			r -= m.Weight
		}
	case Sticky:
		return g.appendSticky(dst, key, now)
	default:
		start = int(g.sched[ctr%uint64(len(g.sched))])
	}
	for i := 0; i < n; i++ {
		if m := g.ms[(start+i)%n]; m.Healthy(now) {
			dst = append(dst, m)
		}
	}
	if pol == LeastConn {
		// Insertion sort by load per weight; equal loads keep the
		// round-robin order, so idle members still take turns.
		s := dst[n0:]
		for i := 1; i < len(s); i++ {
			for j := i; j > 0 && less(s[j], s[j-1]); j-- {
				s[j], s[j-1] = s[j-1], s[j]
			}
		}
	}
	return dst
}

func less(a, b *Member) bool {
	return a.active.Load()*int64(b.Weight) < b.active.Load()*int64(a.Weight)
}

// appendSticky orders healthy members by weighted rendezvous score for key:
// score = weight / -ln(u), u uniform in (0,1) from hash(member, key).
func (g *group) appendSticky(dst []*Member, key string, now time.Time) []*Member {
	var scoreBuf [16]float64
	scores := scoreBuf[:0]
	n0 := len(dst)
	for i, m := range g.ms {
		if !m.Healthy(now) {
			continue
		}
		h := mix(fnvAdd(g.seeds[i], key))
		u := (float64(h>>11) + 0.5) / (1 << 53)
		dst = append(dst, m)
		scores = append(scores, float64(m.Weight)/-math.Log(u))
	}
	s := dst[n0:]
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && scores[j] > scores[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
			scores[j], scores[j-1] = scores[j-1], scores[j]
		}
	}
	return dst
}

// Package suggest finds the known name closest to a mistyped one: the
// "did you mean" of unknown configuration keys and command-line flags.
package suggest

import "strings"

// Closest returns the candidate nearest to name by edit distance (case
// ignored), when it is near enough to be a typo: at most 2 edits, or a
// third of the name's length for long names. ok is false when none is.
func Closest(name string, candidates []string) (best string, ok bool) {
	n := strings.ToLower(name)
	bestD := -1
	for _, c := range candidates {
		d := distance(n, strings.ToLower(c))
		if d == 0 || (bestD >= 0 && d > bestD) || (d == bestD && c > best) {
			continue
		}
		best, bestD = c, d
	}
	if bestD < 0 || bestD > max(2, len(n)/3) {
		return "", false
	}
	return best, true
}

// distance is the Levenshtein distance of a and b (bytes).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

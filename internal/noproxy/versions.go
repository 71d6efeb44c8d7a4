package noproxy

import (
	"fmt"
	"strconv"
	"strings"
)

// Range is an interval of a client's releases. From is the first release
// in it; the end is either To, the last release the model was checked
// against (inclusive), or Below, the first release of the next row
// (exclusive) when the releases in between were not each checked.
type Range struct {
	From  string
	To    string
	Below string
}

// Contains reports whether version v lies in r.
func (r Range) Contains(v string) bool {
	if compareVersions(v, r.From) < 0 {
		return false
	}
	if r.Below != "" {
		return compareVersions(v, r.Below) < 0
	}
	return compareVersions(v, r.To) <= 0
}

// String is "8.10.1–8.13.1" or "8.9.0–<8.18.0".
func (r Range) String() string {
	if r.Below != "" {
		return r.From + "–<" + r.Below
	}
	if r.To == r.From {
		return r.From
	}
	return r.From + "–" + r.To
}

// last is the newest release r is known to contain, for ordering rows.
func (r Range) last() string {
	if r.Below != "" {
		return r.From
	}
	return r.To
}

// parseVersion reads "1.21", "v8.10.1", "3.13.0" as numbers; a missing
// component is 0. Anything after the numeric components (a pre-release or
// distribution suffix) is ignored.
func parseVersion(v string) ([]int, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "v")
	if s == "" {
		return nil, fmt.Errorf("empty version")
	}
	var out []int
	for _, part := range strings.Split(s, ".") {
		digits := part
		for i, c := range part {
			if c < '0' || c > '9' {
				digits = part[:i]
				break
			}
		}
		if digits == "" {
			if len(out) == 0 {
				return nil, fmt.Errorf("version %q does not start with a number", v)
			}
			break
		}
		n, err := strconv.Atoi(digits)
		if err != nil || n > 1<<30 {
			return nil, fmt.Errorf("version %q: bad number %q", v, digits)
		}
		out = append(out, n)
		if digits != part {
			break
		}
	}
	return out, nil
}

// compareVersions orders two versions numerically (unparsable ones first).
func compareVersions(a, b string) int {
	x, errA := parseVersion(a)
	y, errB := parseVersion(b)
	switch {
	case errA != nil && errB != nil:
		return strings.Compare(a, b)
	case errA != nil:
		return -1
	case errB != nil:
		return 1
	}
	for i := 0; i < len(x) || i < len(y); i++ {
		var p, q int
		if i < len(x) {
			p = x[i]
		}
		if i < len(y) {
			q = y[i]
		}
		if p != q {
			if p < q {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Versions lists a row's ranges: "6.14.1–<7.22.0" or "22.21.0–22.23.5, 24.5.0–26.12.1".
func (c Client) Versions() string {
	parts := make([]string, len(c.Ranges))
	for i, r := range c.Ranges {
		parts[i] = r.String()
	}
	return strings.Join(parts, ", ")
}

// ContainsVersion reports whether a release of c's family is one of c's ranges.
func (c Client) ContainsVersion(v string) bool {
	for _, r := range c.Ranges {
		if r.Contains(v) {
			return true
		}
	}
	return false
}

// newest is the newest release c is known to contain.
func (c Client) newest() string {
	n := ""
	for _, r := range c.Ranges {
		if l := r.last(); n == "" || compareVersions(l, n) > 0 {
			n = l
		}
	}
	return n
}

// familyRows returns the rows of a family.
func familyRows(family string) []Client {
	var out []Client
	for _, c := range Clients() {
		if c.Family == family {
			out = append(out, c)
		}
	}
	return out
}

// ClientForVersion returns the row of family whose ranges contain version.
// A version outside every range is an error that lists the family's ranges.
func ClientForVersion(family, version string) (Client, error) {
	rows := familyRows(family)
	if len(rows) == 0 {
		return Client{}, fmt.Errorf("unknown client %q (known: %s)", family, strings.Join(ClientNames(), ", "))
	}
	if _, err := parseVersion(version); err != nil {
		return Client{}, fmt.Errorf("client %s@%s: %v", family, version, err)
	}
	for _, c := range rows {
		if c.ContainsVersion(version) {
			return c, nil
		}
	}
	var ranges []string
	for _, c := range rows {
		ranges = append(ranges, c.Name+" "+c.Versions())
	}
	return Client{}, fmt.Errorf("no %s model covers version %s (modelled: %s)", family, version, strings.Join(ranges, "; "))
}

package noproxy

import (
	"net/netip"
	"strings"
)

func lower(s string) string { return strings.ToLower(s) }
func upper(s string) string { return strings.ToUpper(s) }

// looksMeantFor reports whether a raw entry plausibly targets t (used only to
// pick which ignored entries to mention in a reason).
func looksMeantFor(raw string, t *target) bool {
	r := strings.ToLower(strings.TrimSpace(raw))
	r = strings.Trim(r, "[]")
	r = strings.TrimPrefix(r, "*")
	r = strings.TrimPrefix(r, ".")
	if r == "" {
		return false
	}
	if p, err := netip.ParsePrefix(r); err == nil && t.ip.IsValid() {
		return p.Masked().Contains(t.ip.Unmap()) || p.Masked().Contains(t.ip)
	}
	if a, err := netip.ParseAddr(r); err == nil && t.ip.IsValid() {
		return a.Unmap() == t.ip.Unmap()
	}
	if h, _, ok := strings.Cut(r, ":"); ok && !strings.Contains(r, "::") {
		r = h
	}
	return t.hostname == r || strings.HasSuffix(t.hostname, "."+r) || strings.HasSuffix(t.hostname, r)
}

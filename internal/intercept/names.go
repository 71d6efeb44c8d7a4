package intercept

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Name is the one name a leaf certificate is issued for: a DNS name
// (lower case, no trailing dot) or an IP address.
type Name struct {
	DNS string     // set for a name
	IP  netip.Addr // set for an address literal
}

// String is the name as it appears in the certificate (and in logs).
func (n Name) String() string {
	if n.IP.IsValid() {
		return n.IP.String()
	}
	return n.DNS
}

// ErrNameMismatch is returned by LeafName when the TLS server name the client
// sent is not the host its CONNECT asked for: egret issues no certificate
// for a name it was not asked to reach (the client may be trying to reach
// one host through a tunnel admitted for another).
var ErrNameMismatch = errors.New("the TLS server name differs from the CONNECT target")

// maxNameLen is the longest DNS name (RFC 1035: 253 characters in text form).
const maxNameLen = 253

// LeafName decides the name of the leaf for a tunnel: connectHost is the
// host of the admitted CONNECT target (a name or an IP literal, without
// brackets or port), sni the server name of the client's ClientHello ("" when
// it sent none). Both are compared case-insensitively and without a trailing
// dot; an SNI that differs from the target is ErrNameMismatch, a target that
// is not a valid DNS name or IP address is refused, and a wildcard is never a
// name (a client cannot ask for a wildcard leaf).
func LeafName(connectHost, sni string) (Name, error) {
	target, err := parseName(connectHost)
	if err != nil {
		return Name{}, fmt.Errorf("CONNECT target: %w", err)
	}
	if sni == "" {
		return target, nil
	}
	s, err := parseName(sni)
	if err != nil {
		return Name{}, fmt.Errorf("TLS server name: %w", err)
	}
	if s != target {
		return Name{}, fmt.Errorf("%w: server name %s, CONNECT %s", ErrNameMismatch, s, target)
	}
	return target, nil
}

// parseName reads a DNS name or an IP literal.
func parseName(h string) (Name, error) {
	if h == "" {
		return Name{}, errors.New("empty name")
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return Name{}, errors.New("an address with a zone has no certificate")
		}
		return Name{IP: a}, nil
	}
	h = strings.TrimSuffix(h, ".")
	if len(h) == 0 || len(h) > maxNameLen {
		return Name{}, fmt.Errorf("a name of %d characters is not a DNS name", len(h))
	}
	lower := true
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			lower = false
			break
		}
	}
	if !lower {
		h = strings.ToLower(h)
	}
	last := ""
	for label := range strings.SplitSeq(h, ".") {
		if err := checkLabel(label); err != nil {
			return Name{}, fmt.Errorf("%s is not a DNS name: %w", strconv.Quote(h), err)
		}
		last = label
	}
	if isDigits(last) {
		// 1.2.3, 010.1.1.1 or 0x7f.1: what some resolvers read as an
		// IPv4 address, and no DNS name (no top-level domain is numeric).
		return Name{}, fmt.Errorf("%s is neither a DNS name nor an IP address", strconv.Quote(h))
	}
	return Name{DNS: h}, nil
}

// checkLabel accepts letters, digits, '-' and '_' (seen in real host names),
// 1 to 63 of them, not starting or ending with '-'.
func checkLabel(l string) error {
	if l == "" {
		return errors.New("an empty label")
	}
	if len(l) > 63 {
		return errors.New("a label longer than 63 characters")
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return errors.New("a label starts or ends with '-'")
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			continue
		}
		if c == '*' {
			return errors.New("a wildcard")
		}
		return fmt.Errorf("the character %q", c)
	}
	return nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Package severity is the one scale of how bad a finding is, shared by
// egret's NO_PROXY lint (package noproxy), the manifest lint and the
// admission webhook's validation (package lint).
package severity

import (
	"fmt"
	"strings"
)

// Level says how bad a finding is. The zero value is not a valid level.
type Level uint8

// The levels, in increasing order. An Error makes `egret lint` exit 1 and
// the webhook refuse the pod (in enforcing mode).
const (
	Info Level = iota + 1
	Warning
	Error
)

// String returns "info", "warning" or "error".
func (l Level) String() string {
	switch l {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Error:
		return "error"
	default:
		return fmt.Sprintf("unknown(%d)", uint8(l))
	}
}

// MarshalText writes the level as its String form (JSON and YAML use it).
func (l Level) MarshalText() ([]byte, error) {
	if l < Info || l > Error {
		return nil, fmt.Errorf("invalid severity %d", uint8(l))
	}
	return []byte(l.String()), nil
}

// UnmarshalText reads "info", "warning" or "error".
func (l *Level) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Parse reads "info", "warning" (or "warn") or "error", in any case.
func Parse(s string) (Level, error) {
	switch strings.ToLower(s) {
	case "info":
		return Info, nil
	case "warning", "warn":
		return Warning, nil
	case "error":
		return Error, nil
	}
	return 0, fmt.Errorf("unknown severity %q (want info, warning or error)", s)
}

package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestLogLine(t *testing.T) {
	l := newLine(time.Date(2026, 12, 1, 6, 0, 0, 123456789, time.UTC), "request")
	l.str("dest", "a\"b\\c\n\x01é")
	l.int("status", 502)
	l.ms("duration_ms", 1234567*time.Nanosecond)
	var m map[string]any
	if err := json.Unmarshal(l.end(), &m); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if m["time"] != "2026-12-01T06:00:00.123456789Z" || m["level"] != "INFO" || m["msg"] != "request" ||
		m["dest"] != "a\"b\\c\n\x01é" || m["status"] != 502.0 || m["duration_ms"] != 1.234 {
		t.Errorf("decoded %v", m)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\"back\\slash", "\x00\x1f\x7f", "\xff\xfe", "日本語", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q encoded as invalid JSON %s: %v", s, b, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = strings.ToValidUTF8(s, "\ufffd")
			// Each invalid byte becomes its own replacement character.
			if utf8.RuneCountInString(got) < utf8.RuneCountInString(want) {
				t.Fatalf("%q decoded to %q", s, got)
			}
			return
		}
		if got != want {
			t.Fatalf("%q round-tripped to %q", s, got)
		}
	})
}

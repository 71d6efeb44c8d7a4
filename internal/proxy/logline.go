package proxy

import (
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"egret.io/egret/internal/route"
)

// logLine encodes one access log line as JSON, in the same shape as the
// operational log (slog's JSON handler: time, level, msg, then fields),
// without reflection, caller lookups or allocations: it runs for every
// request and tunnel.
type logLine struct{ b []byte }

var linePool = sync.Pool{New: func() any { return &logLine{b: make([]byte, 0, 512)} }}

func newLine(t time.Time, msg string) *logLine {
	l := linePool.Get().(*logLine)
	l.b = append(l.b[:0], `{"time":"`...)
	l.b = t.AppendFormat(l.b, time.RFC3339Nano)
	l.b = append(l.b, `","level":"INFO","msg":`...)
	l.b = appendJSONString(l.b, msg)
	return l
}

func (l *logLine) str(k, v string) {
	l.b = append(l.b, ',', '"')
	l.b = append(l.b, k...)
	l.b = append(l.b, '"', ':')
	l.b = appendJSONString(l.b, v)
}

func (l *logLine) int(k string, v int64) {
	l.b = append(l.b, ',', '"')
	l.b = append(l.b, k...)
	l.b = append(l.b, '"', ':')
	l.b = strconv.AppendInt(l.b, v, 10)
}

// detail writes a decision's Detail without building the string.
func (l *logLine) detail(k string, d *route.Decision) {
	l.b = append(l.b, ',', '"')
	l.b = append(l.b, k...)
	l.b = append(l.b, '"', ':', '"')
	l.b = appendJSONChars(l.b, d.Reason.String())
	if d.Entry != "" {
		l.b = append(l.b, ' ')
		l.b = appendJSONChars(l.b, d.Entry)
	}
	if d.Source != "" {
		l.b = append(l.b, ' ', '(')
		l.b = appendJSONChars(l.b, d.Source)
		l.b = append(l.b, ')')
	}
	l.b = append(l.b, '"')
}

// ms writes a duration in milliseconds with microsecond precision.
func (l *logLine) ms(k string, d time.Duration) {
	l.b = append(l.b, ',', '"')
	l.b = append(l.b, k...)
	l.b = append(l.b, '"', ':')
	l.b = strconv.AppendFloat(l.b, float64(d.Microseconds())/1000, 'f', -1, 64)
}

// end closes the line and returns its bytes, valid until release.
func (l *logLine) end() []byte {
	l.b = append(l.b, '}', '\n')
	return l.b
}

func (l *logLine) release() {
	if cap(l.b) <= 4096 {
		linePool.Put(l)
	}
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendJSONChars(b, s)
	return append(b, '"')
}

// appendJSONChars appends s escaped for a JSON string, without quotes.
func appendJSONChars(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}

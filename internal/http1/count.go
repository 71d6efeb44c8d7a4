package http1

import (
	"errors"
	"net"
)

// errHeaderTooLarge ends a header read that went past its limit.
var errHeaderTooLarge = errors.New("header section too large")

// countingReader reads from a connection, bounding the bytes a message
// header may take while limited, counting every byte, and, while
// recording, keeping a copy of what it read (the raw request header,
// checked for fields http.ReadRequest leaves no trace of).
type countingReader struct {
	c         net.Conn
	n         int64 // bytes read so far
	remain    int64
	limited   bool
	hit       bool
	recording bool
	rec       []byte
}

func (l *countingReader) Read(p []byte) (int, error) {
	if l.limited {
		if l.remain <= 0 {
			l.hit = true
			return 0, errHeaderTooLarge
		}
		if int64(len(p)) > l.remain {
			p = p[:l.remain]
		}
	}
	n, err := l.c.Read(p)
	l.n += int64(n)
	if l.limited {
		l.remain -= int64(n)
	}
	if l.recording {
		l.rec = append(l.rec, p[:n]...)
	}
	return n, err
}

func (l *countingReader) limit(n int64) { l.limited, l.remain, l.hit = true, n, false }

func (l *countingReader) unlimit() { l.limited = false }

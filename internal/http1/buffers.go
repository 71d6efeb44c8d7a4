package http1

import (
	"bufio"
	"io"
	"sync"
)

// BufSize is the size of the buffered readers and writers of client and
// origin connections.
const BufSize = 4 << 10

// HeaderSlack is read beyond a header limit before the header is refused,
// like net/http: the reader's buffer may hold the start of the body.
const HeaderSlack = BufSize

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, BufSize) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, BufSize) }}
	copyPool   = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
)

// GetReader returns a pooled buffered reader of r; PutReader gives it back.
func GetReader(r io.Reader) *bufio.Reader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

// PutReader returns br to the pool.
func PutReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}

// GetWriter returns a pooled buffered writer to w; PutWriter gives it back.
func GetWriter(w io.Writer) *bufio.Writer {
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(w)
	return bw
}

// PutWriter returns bw to the pool.
func PutWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writerPool.Put(bw)
}

func getCopyBuf() *[]byte  { return copyPool.Get().(*[]byte) }
func putCopyBuf(b *[]byte) { copyPool.Put(b) }

// Buffered returns a copy of what br holds beyond the message already read:
// bytes the peer sent ahead (a tunnel's first payload, say).
func Buffered(br *bufio.Reader) []byte {
	n := br.Buffered()
	if n == 0 {
		return nil
	}
	p := make([]byte, n)
	io.ReadFull(br, p)
	return p
}

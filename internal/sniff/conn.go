package sniff

import (
	"io"
	"net"
)

// Conn replays the bytes Sniff peeked before reading on from the
// underlying connection. It keeps the relay fast path: WriteTo hands the
// rest of the stream to the underlying connection's own copy (splice for
// TCP), and CloseWrite half-closes it.
type Conn struct {
	net.Conn
	peeked []byte
}

// NewConn returns c with peeked put back in front of its stream. c must not
// be read directly afterwards. A Conn is as safe for concurrent use as c:
// one reader and one writer.
func NewConn(c net.Conn, peeked []byte) *Conn {
	return &Conn{Conn: c, peeked: peeked}
}

// Read implements io.Reader: the peeked bytes first, then the connection.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.peeked) > 0 {
		n := copy(p, c.peeked)
		c.peeked = c.peeked[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// WriteTo implements io.WriterTo: it writes the peeked bytes to w, then
// copies the rest of the connection with io.Copy (which uses the
// connection's WriteTo or w's ReadFrom, so splice survives).
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	var total int64
	if len(c.peeked) > 0 {
		n, err := w.Write(c.peeked)
		total += int64(n)
		c.peeked = c.peeked[n:]
		if err != nil {
			return total, err
		}
	}
	n, err := io.Copy(w, c.Conn)
	return total + n, err
}

// CloseWrite half-closes the underlying connection when it supports it
// (TCP, TLS, Unix); otherwise it closes it.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

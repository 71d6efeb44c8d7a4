package proxy

import (
	"io"
	"net/http"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/proxystatus"
)

// How a CONNECT's tunnel is answered: the CONNECT side of the tail
// (tail.go). The tail calls it down here — refusal, hand-over, 200 — and
// it calls nothing back in the listener's file: a CONNECT's walk goes
// engine.go → connect.go → tail.go → answer.go (→ respond.go for a
// refusal) and never returns to a file it left.

// established is the answer to a CONNECT whose tunnel is up.
const established = "HTTP/1.1 200 Connection established\r\n\r\n"

// connectSide is a CONNECT's part in the tail: HTTP answers.
type connectSide struct {
	cc   *clientConn
	req  *http.Request
	keep bool // the connection may carry another request (after a refusal)
}

func (cs *connectSide) refuse(ev *event, e *proxystatus.Error, _ error) {
	cs.keep = cs.cc.fail(cs.req, ev, e, false)
}

func (cs *connectSide) hand(sc *Conn) { cs.cc.handOff(sc) }

func (cs *connectSide) established([]byte) ([]byte, *proxystatus.Error) {
	if _, err := io.WriteString(cs.cc.c, established); err != nil {
		return nil, clientGone(err)
	}
	return http1.Buffered(cs.cc.r.Buf()), nil
}

// handOff gives the connection to the tunnel of sc: the tunnel closes it
// and, when it ends, releases the client's connection slot (sc's lease).
func (cc *clientConn) handOff(sc *Conn) {
	cc.handedOff = true
	sc.lease.hold(cc.slot)
	cc.slot = nil
}

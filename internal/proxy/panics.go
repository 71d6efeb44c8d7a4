package proxy

import (
	"fmt"
	"runtime"
)

// Where a recovered panic happened: the values of the panics metric's
// label.
const (
	panicConnection = "connection" // a listener's handler
	panicRelay      = "relay"      // a tunnel's relay goroutine
	panicIntercept  = "intercept"  // an intercepted tunnel's engine
)

// panicked logs a panic recovered in where and counts it: one tunnel or
// connection ends, the process goes on. The log names the panic's type
// (or a runtime error's own message) and the stack, never the value's
// text, which may hold whatever the panicking code had at hand (a header,
// a credential).
func (s *Server) panicked(where, client string, v any, stack []byte) {
	s.log.Error("panic recovered: the "+where+" was closed", "where", where, "client", client,
		"panic", panicText(v), "stack", string(stack))
	if s.m != nil {
		s.m.Panics.WithLabelValues(where).Inc()
	}
}

// relayPanic is every relayed tunnel's relay.Tunnel.OnPanic (bound once in
// New: setting it costs a tunnel no allocation).
func (s *Server) relayPanic(v any, stack []byte) { s.panicked(panicRelay, "", v, stack) }

// panicText is what a log may say of a panic's value.
func panicText(v any) string {
	if e, ok := v.(runtime.Error); ok {
		return e.Error() // the runtime's own words: an index, a nil dereference
	}
	return fmt.Sprintf("a panic with a value of type %T", v)
}

package proxy

// lease is what admission lets one request or tunnel hold: the client's
// in-flight slot (Protection.Clients), the workload's slot, the tunnel
// slot, the destination's slot — and, once the request or tunnel has a
// connection, that connection's client slot (Protection.ClientConns) and
// its member's connection count. The end of the request or tunnel releases
// it (end), once, whatever logs it: the access log frees nothing.
//
// Who holds it: admit builds the admission's lease and keeps it only when
// it admits (a refusal releases what it took); open moves it into the
// connection it dials (Conn: released when the tunnel ends or the
// connection is closed); a forwarded request's exchange ends it when its
// response is over; a raw listener's connection (transparent, SOCKS5)
// ends what it still holds when its handler returns.
type lease struct{ fs []func() }

// hold adds a release to the lease (nil: nothing to release).
func (l *lease) hold(f func()) {
	if f != nil {
		l.fs = append(l.fs, f)
	}
}

// take moves what o holds into l; o holds nothing after.
func (l *lease) take(o *lease) {
	if len(l.fs) == 0 {
		l.fs, o.fs = o.fs, nil
		return
	}
	l.fs = append(l.fs, o.fs...)
	o.fs = nil
}

// end releases everything held, once: a second end releases nothing.
func (l *lease) end() {
	fs := l.fs
	l.fs = nil
	for _, f := range fs {
		f()
	}
}

package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"egret.io/egret/internal/proxystatus"
)

// session is one intercepted tunnel: the handler of its requests and the
// transport that carries them to the origin. It owns the origin
// connections and closes them when the tunnel ends.
type session struct {
	e         *Engine
	t         *Tunnel
	authority string // host:port of the origin, for request URLs
	proto     string // negotiated with the client
	tr        *http.Transport
	rp        *httputil.ReverseProxy
	tlsBoth   *tls.Config // to the origin, offering h2 and http/1.1
	tlsH1     *tls.Config // for upgrades, which need HTTP/1.1

	preMu sync.Mutex
	pre   chan dialResult // the connection dialed during the client's handshake
	first net.Conn        // Tunnel.Origin until used

	certAsked atomic.Bool // the origin asked for a client certificate

	// handlers counts the requests in their handlers; once ended is set
	// (Serve is done with the connection) no handler starts. HTTP/2 starts
	// a handler on a goroutine of its own that may run after ServeConn
	// returned, so Add under hmu, never racing Wait.
	hmu      sync.Mutex
	ended    bool
	handlers sync.WaitGroup
	requests atomic.Int64
}

// enter counts a handler in, unless the session has ended.
func (s *session) enter() bool {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.ended {
		return false
	}
	s.handlers.Add(1)
	return true
}

// waitHandlers ends the session for new handlers and waits for the running
// ones (a hijacked, upgraded connection is still in its handler).
func (s *session) waitHandlers() {
	s.hmu.Lock()
	s.ended = true
	s.hmu.Unlock()
	s.handlers.Wait()
}

type dialResult struct {
	c   *tls.Conn
	err error
}

func newSession(e *Engine, t *Tunnel) *session {
	s := &session{e: e, t: t, authority: net.JoinHostPort(t.Host, t.Port), first: t.Origin}
	s.tlsBoth = &tls.Config{
		ServerName:         t.Host,
		RootCAs:            e.RootCAs,
		NextProtos:         []string{"h2", "http/1.1"},
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: e.sessions,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			s.certAsked.Store(true)
			return &tls.Certificate{}, nil
		},
	}
	s.tlsH1 = s.tlsBoth.Clone()
	s.tlsH1.NextProtos = []string{"http/1.1"}
	n := e.maxOriginConns()
	s.tr = &http.Transport{
		DialTLSContext:         s.dialOrigin,
		ForceAttemptHTTP2:      true,
		MaxConnsPerHost:        n,
		MaxIdleConnsPerHost:    n,
		IdleConnTimeout:        e.idleTimeout(),
		ResponseHeaderTimeout:  e.ResponseHeaderTimeout,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true, // bodies pass as the origin sent them
		MaxResponseHeaderBytes: 1 << 20,
	}
	if h2t, err := http2.ConfigureTransports(s.tr); err == nil {
		h2t.MaxHeaderListSize = 1 << 20
		h2t.ReadIdleTimeout = 30 * time.Second
		h2t.PingTimeout = 15 * time.Second
	}
	s.rp = &httputil.ReverseProxy{
		Rewrite:      s.rewrite,
		Transport:    s.tr,
		BufferPool:   &e.bufs,
		ErrorHandler: s.originError,
		ErrorLog:     discardLog,
	}
	return s
}

// predial starts the first origin connection while the client's handshake
// finishes, so a request finds it ready.
func (s *session) predial(ctx context.Context) {
	ch := make(chan dialResult, 1)
	s.preMu.Lock()
	s.pre = ch
	s.preMu.Unlock()
	go func() {
		defer func() {
			// Nothing above this goroutine would recover a panic: it ends
			// this dial, never the process (Tunnel.Dial recovers its own).
			if v := recover(); v != nil {
				ch <- dialResult{nil, errors.New("the connection to the origin failed: an internal error")}
			}
		}()
		c, err := s.dialTLS(ctx, s.tlsBoth)
		ch <- dialResult{c, err}
	}()
}

// close ends the tunnel's origin side.
func (s *session) close() {
	s.preMu.Lock()
	ch := s.pre
	s.pre = nil
	first := s.first
	s.first = nil
	s.preMu.Unlock()
	if ch != nil {
		if r := <-ch; r.c != nil {
			r.c.Close()
		}
	}
	if first != nil {
		first.Close()
	}
	s.tr.CloseIdleConnections()
}

// h1Only marks the context of a request that must reach the origin over
// HTTP/1.1 (an Upgrade).
type h1Only struct{}

// dialOrigin is the transport's dialer: the connection made during the
// handshake first, then new ones to the tunnel's admitted destination. The
// address the transport asks for is ignored: it is always the tunnel's.
func (s *session) dialOrigin(ctx context.Context, _, _ string) (net.Conn, error) {
	only1 := ctx.Value(h1Only{}) != nil
	s.preMu.Lock()
	ch := s.pre
	s.pre = nil
	s.preMu.Unlock()
	if ch != nil {
		r := <-ch
		if r.err != nil {
			return nil, r.err
		}
		if !only1 || r.c.ConnectionState().NegotiatedProtocol != "h2" {
			return r.c, nil
		}
		r.c.Close()
	}
	cfg := s.tlsBoth
	if only1 {
		cfg = s.tlsH1
	}
	return s.dialTLS(ctx, cfg)
}

// dialTLS connects to the origin and verifies it.
func (s *session) dialTLS(ctx context.Context, cfg *tls.Config) (*tls.Conn, error) {
	s.preMu.Lock()
	raw := s.first
	s.first = nil
	s.preMu.Unlock()
	if raw == nil {
		var err error
		if raw, err = s.t.Dial(ctx); err != nil {
			return nil, err
		}
	}
	tc := tls.Client(raw, cfg)
	hctx, cancel := context.WithTimeout(ctx, s.e.handshakeTimeout())
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, &originTLSError{host: s.t.Host, err: err, certAsked: s.certAsked.Load()}
	}
	s.e.stats.origin.Add(1)
	if tc.ConnectionState().DidResume {
		s.e.stats.resumed.Add(1)
	}
	return tc, nil
}

// originTLSError is a failed handshake with the origin.
type originTLSError struct {
	host      string
	err       error
	certAsked bool
}

func (e *originTLSError) Error() string { return "TLS to " + e.host + ": " + e.err.Error() }
func (e *originTLSError) Unwrap() error { return e.err }

// status maps the failure to what the client is told.
func (e *originTLSError) status() *proxystatus.Error {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
	)
	switch {
	case errors.As(e.err, &verr), errors.As(e.err, &uerr), errors.As(e.err, &herr), errors.As(e.err, &cerr):
		return &proxystatus.Error{Type: proxystatus.TLSCertificateError, Err: e,
			Detail: "the certificate of " + e.host + " did not verify against the system roots and egret's configured CAs: " + proxystatus.Text(e.err)}
	case e.certAsked:
		return &proxystatus.Error{Type: proxystatus.TLSProtocolError, Err: e,
			Detail: e.host + " asks for a client certificate, which egret cannot present for the client: exempt it from interception"}
	}
	var ne net.Error
	if errors.As(e.err, &ne) && ne.Timeout() {
		return &proxystatus.Error{Type: proxystatus.ConnectionTimeout, Err: e, Detail: "TLS handshake with " + e.host + " timed out"}
	}
	return &proxystatus.Error{Type: proxystatus.TLSProtocolError, Err: e, Detail: "TLS handshake with " + e.host + ": " + proxystatus.Text(e.err)}
}

// rewrite sends the request to the tunnel's origin, unchanged apart from
// what the handler already did (credentials), Via and the URL.
func (s *session) rewrite(pr *httputil.ProxyRequest) {
	u := pr.Out.URL
	u.Scheme, u.Host = "https", s.authority
	pr.Out.Header.Add("Via", via(pr.In.ProtoMajor))
}

func via(major int) string {
	if major == 2 {
		return "2 egret"
	}
	return "1.1 egret"
}

// reqState is what the handler learns about one request, shared with the
// error handler.
type reqState struct {
	err *proxystatus.Error
}

type reqStateKey struct{}

// originError answers a request the transport could not complete before
// the response started.
func (s *session) originError(w http.ResponseWriter, r *http.Request, err error) {
	st, _ := r.Context().Value(reqStateKey{}).(*reqState)
	if r.Context().Err() != nil {
		// The client went away: nobody to answer.
		if st != nil {
			st.err = &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: "the client closed the request", Err: err}
		}
		return
	}
	var pe *proxystatus.Error
	var te *originTLSError
	if errors.As(err, &te) {
		pe = te.status()
	} else {
		pe = proxystatus.From(err)
	}
	if st != nil {
		st.err = pe
	}
	proxystatus.Write(w, pe)
}

// ServeHTTP handles one request inside the tunnel: the destination check,
// the rules, the credentials, then the origin.
func (s *session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		// The tunnel's connection is done: nothing reaches the origin.
		return
	}
	defer s.handlers.Done()
	s.requests.Add(1)
	start := time.Now()
	ev := &Event{
		Client: s.t.Client, Workload: s.t.Workload, Host: s.t.Host, Port: s.t.Port,
		Method: r.Method, Path: logPath(r.URL.EscapedPath()), Proto: r.Proto,
	}
	if s.t.Site != nil {
		ev.Site = s.t.Site.Name
	}
	cw := &countingWriter{ResponseWriter: w}
	upgrade := isUpgrade(r)
	st := &reqState{}
	defer func() {
		if cw.status == 0 && upgrade && st.err == nil && ev.Err == nil {
			// httputil wrote the 101 on the hijacked connection itself.
			cw.status = http.StatusSwitchingProtocols
		}
		ev.Status, ev.BytesDown, ev.Duration = cw.status, cw.n, time.Since(start)
		if body, ok := r.Body.(*countingBody); ok {
			ev.BytesUp = body.n
		}
		if ev.Err == nil {
			ev.Err = st.err
		}
		if ev.Err != nil && ev.Decision != "deny" {
			s.e.stats.failed.Add(1)
		}
		if s.e.Log != nil {
			s.e.Log(ev)
		}
	}()
	if pe := s.check(r); pe != nil {
		ev.Err = pe
		proxystatus.Write(cw, pe)
		return
	}
	if site := s.t.Site; site != nil {
		v := site.Rules.Decide(r.Method, r.URL.EscapedPath())
		ev.Rule = v.RuleName()
		switch {
		case !v.Denied:
			ev.Decision = "allow"
			s.e.stats.allowed.Add(1)
		case !v.Allowed:
			ev.Decision = "deny"
			s.e.stats.denied.Add(1)
			ev.Err = &proxystatus.Error{Type: proxystatus.HTTPRequestDenied,
				Detail: "egret's policy for " + site.Name + " denies " + r.Method + " " + logPath(v.Path) + " (" + v.RuleName() + ")"}
			proxystatus.Write(cw, ev.Err)
			return
		default:
			ev.Decision = "would_deny"
			s.e.stats.reported.Add(1)
		}
		for _, c := range site.Credentials {
			if err := c.Apply(r.Header); err != nil {
				ev.Err = &proxystatus.Error{Type: proxystatus.ProxyConfigurationErr, Status: http.StatusServiceUnavailable, Err: err,
					Detail: "the credential egret adds for " + site.Name + " (" + c.Name + ") is not available: " + err.Error()}
				proxystatus.Write(cw, ev.Err)
				return
			}
			ev.Credentials = append(ev.Credentials, c.Name)
		}
	} else {
		ev.Decision = "allow"
		s.e.stats.allowed.Add(1)
	}
	ctx := context.WithValue(r.Context(), reqStateKey{}, st)
	if upgrade {
		ctx = context.WithValue(ctx, h1Only{}, true)
		// The client speaks and listens at once after a 101.
	} else if s.proto != "h2" {
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body}
	}
	s.rp.ServeHTTP(cw, r.WithContext(ctx))
}

// check refuses what has no place inside an intercepted tunnel: a request
// for another host (the tunnel was admitted for one destination; a Host
// that differs is domain fronting, and the origin would route by it) and a
// CONNECT (a tunnel inside the tunnel would escape the rules).
func (s *session) check(r *http.Request) *proxystatus.Error {
	if r.Method == http.MethodConnect {
		return &proxystatus.Error{Type: proxystatus.HTTPRequestDenied,
			Detail: "CONNECT inside an intercepted tunnel to " + s.t.Host + " is not allowed"}
	}
	if !validTarget(r.RequestURI) {
		return &proxystatus.Error{Type: proxystatus.HTTPRequestError,
			Detail: "the request target holds a character a URI may not (a space, a control character, a quote, a backslash, ...)"}
	}
	if r.Host == "" {
		r.Host = s.authority
		return nil
	}
	host, port := r.Host, ""
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if !strings.EqualFold(strings.TrimSuffix(host, "."), strings.TrimSuffix(s.t.Host, ".")) || port != "" && port != s.t.Port {
		return &proxystatus.Error{Type: proxystatus.HTTPRequestDenied, Status: http.StatusMisdirectedRequest,
			Detail: "the request is for " + oneLine(r.Host) + " but the tunnel was admitted for " + s.authority}
	}
	return nil
}

// validTarget reports whether a request target (as the client sent it)
// holds only characters of RFC 3986: what the origin sees is then what the
// rules judged, with nothing for the next hop to read differently.
func validTarget(t string) bool {
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"<>\\^`{|}", c) >= 0 {
			return false
		}
	}
	return true
}

func isUpgrade(r *http.Request) bool {
	if r.ProtoMajor != 1 || r.Header.Get("Upgrade") == "" {
		return false
	}
	for _, v := range r.Header["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// logPath is a path fit for a log line: bounded.
func logPath(p string) string {
	const max = 256
	if len(p) > max {
		return p[:max] + "..."
	}
	return p
}

// countingWriter records the status and counts the body bytes written; it
// unwraps for http.ResponseController (flush, hijack, full duplex).
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush is here as well as through Unwrap: httputil's upgrade path asks
// for it directly.
func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// countingBody counts the request body bytes read.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

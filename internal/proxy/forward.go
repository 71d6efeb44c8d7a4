package proxy

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

// fwdKey carries a *fwdState in a forwarded request's context.
type fwdKey struct{}

// fwdState is what the transport's hooks need to know about one forwarded
// request: its decision, and the member of the attempt under way.
type fwdState struct {
	ev     *event
	st     *State
	dest   route.Dest
	pool   *upstream.Pool
	member *upstream.Member
	cred   *credentials.Credential
}

func stateOf(ctx context.Context) *fwdState {
	fs, _ := ctx.Value(fwdKey{}).(*fwdState)
	return fs
}

func (s *Server) serveForward(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ev := &event{kind: metrics.KindHTTP, client: r.RemoteAddr, method: r.Method, dest: r.URL.Host, start: time.Now()}
	if e := s.admitClient(ev); e != nil {
		s.fail(w, ctx, ev, e)
		return
	}
	scheme := strings.ToLower(r.URL.Scheme)
	var defPort uint16
	switch scheme {
	case "http":
		defPort = 80
	case "https":
		defPort = 443
	default:
		s.fail(w, ctx, ev, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "unsupported URL scheme " + scheme + ": egret forwards http:// and https:// URLs, and tunnels anything with CONNECT"})
		return
	}
	dest, err := route.ParseDest(r.URL.Host, defPort)
	if err != nil {
		s.fail(w, ctx, ev, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "request URL: " + err.Error()})
		return
	}
	ev.dest = dest.String()
	ev.url = scheme + "://" + r.URL.Host + r.URL.EscapedPath() // no query: it may hold tokens
	if s.loop(r) {
		s.fail(w, ctx, ev, &proxystatus.Error{Type: proxystatus.ProxyLoopDetected, Detail: "this request has already passed through " + s.opts.Via})
		return
	}
	st := s.state.Load()
	ev.dec, ev.decided = s.Route(ctx, st, dest), true
	if ev.dec.Action == route.Deny {
		s.fail(w, ctx, ev, denied(dest, ev.dec))
		return
	}
	breaker, err := s.admitDest(dest, false, &ev.release)
	if err != nil {
		s.fail(w, ctx, ev, proxystatus.From(err))
		return
	}
	fs := &fwdState{ev: ev, st: st, dest: dest}
	// Stream both ways: without this, Go's HTTP/1 server would consume the
	// whole request body before the first byte of the response is written.
	http.NewResponseController(w).EnableFullDuplex()
	cw := &countingWriter{ResponseWriter: w}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body, n: &ev.up}
	}
	defer func() {
		// Runs even when the reverse proxy aborts a response it had
		// started (it panics with http.ErrAbortHandler).
		if breaker {
			var err error
			if ev.err != nil {
				err = ev.err
			}
			s.reportDest(dest, err)
		}
		ev.down = cw.n
		if ev.status == 0 {
			ev.status = cw.status
		}
		s.finish(context.WithoutCancel(ctx), ev)
		if s.m != nil {
			s.m.Duration.WithLabelValues(ev.kind, ev.dec.Action.String()).Observe(time.Since(ev.start).Seconds())
		}
	}()
	s.forward.ServeHTTP(cw, r.WithContext(context.WithValue(ctx, fwdKey{}, fs)))
}

var bufPool = &bytePool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}

type bytePool struct{ p sync.Pool }

func (b *bytePool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bytePool) Put(p []byte) { b.p.Put(&p) }

func (s *Server) newForwarder() http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			in, out := pr.In, pr.Out
			// ReverseProxy drops the client's X-Forwarded-* headers; a
			// forward proxy passes them on untouched and adds none.
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := in.Header[h]; ok {
					out.Header[h] = v
				}
			}
			out.Header["Via"] = append(out.Header["Via"], s.viaValue(in.ProtoMajor, in.ProtoMinor))
		},
		Transport: forwarder{s},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header["Via"] = append(resp.Header["Via"], s.viaValue(resp.ProtoMajor, resp.ProtoMinor))
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			fs := stateOf(r.Context())
			if isClientGone(r.Context(), err) {
				if fs != nil {
					fs.ev.err = &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: "client went away", Err: err}
				}
				return
			}
			pe := proxystatus.From(err)
			if fs != nil {
				fs.ev.err, fs.ev.status = pe, pe.Code()
			}
			proxystatus.Write(w, pe)
		},
		BufferPool: bufPool,
		ErrorLog:   log.New(slogWriter{s.log}, "", 0),
	}
}

func (s *Server) newTransport() *http.Transport {
	return &http.Transport{
		Proxy: func(r *http.Request) (*url.URL, error) {
			if fs := stateOf(r.Context()); fs != nil && fs.member != nil {
				return fs.member.ProxyURLWith(fs.cred), nil
			}
			return nil, nil
		},
		OnProxyConnectResponse: func(ctx context.Context, proxyURL *url.URL, _ *http.Request, resp *http.Response) error {
			if resp.StatusCode/100 == 2 {
				return nil
			}
			name := (&url.URL{Scheme: proxyURL.Scheme, Host: proxyURL.Host}).String()
			return upstream.RefusalError(name, resp)
		},
		DialContext:            s.transportDial,
		DisableCompression:     true, // never change what the origin sends
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    256,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		ResponseHeaderTimeout:  positive(s.opts.Timeouts.ResponseHeader),
		MaxResponseHeaderBytes: 256 << 10,
	}
}

// transportDial dials for the HTTP transport: the destination of a direct
// request (at the addresses routing resolved), or an upstream member.
func (s *Server) transportDial(ctx context.Context, network, addr string) (net.Conn, error) {
	fs := stateOf(ctx)
	if fs != nil && fs.member != nil {
		// The transport dials the member (http, https with the pool's TLS
		// settings, or the socks5 server).
		return fs.pool.DialMember(ctx, fs.member)
	}
	if fs != nil && addr == fs.dest.String() {
		return s.dialDirect(ctx, fs.dest, fs.ev.dec.Addrs)
	}
	d, err := route.ParseDest(addr, 0)
	if err != nil {
		return nil, err
	}
	return s.dialDirect(ctx, d, nil)
}

// forwarder sends a forwarded request directly or through the members of
// its pool in turn. A failing member is skipped only while no byte of the
// request body has been read, so a request is never sent twice: failures
// before the request reached the origin (the member could not be reached,
// or refused it with 407/403) move on for any method; other failures
// (timeouts, a member's 5xx) only for idempotent requests.
type forwarder struct{ s *Server }

func (f forwarder) RoundTrip(req *http.Request) (*http.Response, error) {
	fs := stateOf(req.Context())
	if fs == nil || fs.ev.dec.Action != route.Upstream {
		resp, err := f.s.transport.RoundTrip(req)
		if err != nil {
			return nil, f.transportErr(err, nil)
		}
		return resp, nil
	}
	p := fs.st.pool(fs.ev.dec.Pool)
	if p == nil {
		return nil, &proxystatus.Error{Type: proxystatus.ProxyConfigurationErr, Detail: "route names a pool that does not exist"}
	}
	fs.pool = p
	var rb *replayBody
	if req.Body != nil && req.Body != http.NoBody {
		rb = &replayBody{ReadCloser: req.Body}
		req.Body = rb
	}
	var buf [8]*upstream.Member
	cands := p.AppendCandidates(buf[:0], fs.dest.Host, time.Now())
	if len(cands) == 0 {
		m := p.LastResort(time.Now())
		if m == nil {
			err := p.Unavailable()
			f.s.countUpstreamErr(p.Name, err)
			return nil, err
		}
		cands = append(cands, m)
	}
	idempotent := isIdempotent(req)
	var last error
	for i, m := range cands {
		more := i < len(cands)-1
		fs.member = m
		fs.ev.member = m.Name
		start := time.Now()
		resp, err := f.tryMember(req, p, m, fs, rb, more && idempotent)
		if err == nil {
			fs.ev.connect = time.Since(start)
			return resp, nil
		}
		last = err
		retry := p.Failed(m, err)
		if req.Context().Err() != nil || !retry || !more || (rb != nil && rb.read) || !(idempotent || notSent(err)) {
			break
		}
	}
	return nil, last
}

// tryMember sends req through m. A 407 to the current credential is tried
// again with the previous one while a rotation is pending. A refusal that
// the member wrote itself (403 or 5xx with Squid's X-Squid-Error) is turned
// into an error when failover may follow (mayRetry), and otherwise passed
// on to the client as it is.
func (f forwarder) tryMember(req *http.Request, p *upstream.Pool, m *upstream.Member, fs *fwdState, rb *replayBody, mayRetry bool) (*http.Response, error) {
	cred := m.Credential()
	fs.cred = cred
	release := m.Acquire()
	resp, err := f.roundTrip(req, p, m)
	if code := refusalCode(resp, err); code == http.StatusProxyAuthRequired && m.Credentials() != nil && (rb == nil || !rb.read) {
		if fb := m.Credentials().Fallback(); fb != nil {
			fs.cred = fb
			resp, err = f.roundTrip(req, p, m)
			if err == nil {
				cred = nil // confirm nothing: the new credential was refused
				if ev := p.Events; ev != nil && ev.Fallback != nil {
					ev.Fallback(p.Name, m)
				}
			}
		}
	}
	if err != nil {
		release()
		return nil, err
	}
	if mayRetry && (rb == nil || !rb.read) && memberWrote(resp) {
		rerr := upstream.RefusalError(m.Name, resp)
		resp.Body.Close()
		release()
		return nil, rerr
	}
	p.Succeeded(m, cred)
	resp.Body = &releaseBody{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// roundTrip makes one attempt through m and reports it to the pool's
// events; a 407 is returned as an error.
func (f forwarder) roundTrip(req *http.Request, p *upstream.Pool, m *upstream.Member) (*http.Response, error) {
	resp, err := f.s.transport.RoundTrip(req)
	code := 0
	if err == nil {
		code = resp.StatusCode
		if code == http.StatusProxyAuthRequired {
			resp.Body.Close()
			resp, err = nil, upstream.RefusalError(m.Name, resp)
		}
	} else {
		err = f.transportErr(err, m)
		var r *upstream.Refusal
		if errors.As(err, &r) {
			code = r.Code
		}
	}
	if ev := p.Events; ev != nil && ev.Attempt != nil {
		ev.Attempt(p.Name, m, code, err)
	}
	return resp, err
}

// refusalCode is the member's refusal status in err, or 0.
func refusalCode(resp *http.Response, err error) int {
	var r *upstream.Refusal
	if errors.As(err, &r) {
		return r.Code
	}
	return 0
}

// memberWrote reports whether resp is an error the member wrote itself
// (rather than the origin's answer): 403 or 5xx with Squid's error header.
func memberWrote(resp *http.Response) bool {
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode < 500 {
		return false
	}
	return resp.Header.Get("X-Squid-Error") != ""
}

// notSent reports whether a failed attempt certainly did not reach the
// origin: the member could not be reached or refused the request.
func notSent(err error) bool {
	var r *upstream.Refusal
	if errors.As(err, &r) {
		return r.Code == http.StatusProxyAuthRequired || r.Code == http.StatusForbidden || r.DestinationFault
	}
	// transportErr names the member only when reaching it failed.
	return proxystatus.From(err).Upstream != ""
}

// isIdempotent reports whether req may be sent twice (RFC 9110 section
// 9.2.2), also when it carries an Idempotency-Key.
func isIdempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// releaseBody releases the member's connection count when the response
// body is closed.
type releaseBody struct {
	io.ReadCloser
	release func()
}

func (b *releaseBody) Close() error {
	b.release()
	return b.ReadCloser.Close()
}

// transportErr classifies an error from http.Transport, naming the member
// when the failure was reaching it.
func (f forwarder) transportErr(err error, m *upstream.Member) error {
	out := *proxystatus.From(err)
	var oe *net.OpError
	if m != nil && out.Upstream == "" && errors.As(err, &oe) && oe.Op == "proxyconnect" {
		// The transport could not reach the member itself.
		out.Upstream = m.Name
		out.Detail = "upstream " + m.Name + ": " + out.Detail
		if out.Type == proxystatus.ProxyInternalError {
			out.Type = proxystatus.ConnectionTerminated
		}
		return &out
	}
	if m != nil && out.Upstream == "" {
		out.Detail = "via upstream " + m.Name + ": " + out.Detail
	}
	if out.Type == proxystatus.ProxyInternalError {
		out.Type = proxystatus.HTTPResponseIncomplete
	}
	return &out
}

// replayBody lets the forwarder retry a request whose body has not been
// touched: http.Transport closes the body when an attempt fails, so Close
// is a no-op here (the server closes the real body when the handler ends).
type replayBody struct {
	io.ReadCloser
	read bool
}

func (b *replayBody) Read(p []byte) (int, error) {
	b.read = true
	return b.ReadCloser.Read(p)
}

func (b *replayBody) Close() error { return nil }

// countingBody counts request body bytes.
type countingBody struct {
	io.ReadCloser
	n *int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	atomic.AddInt64(b.n, int64(n)) // the transport may read from its own goroutine
	return n, err
}

// countingWriter records the status and counts response body bytes. It
// unwraps for http.ResponseController (flush, hijack for upgrades).
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 || w.status < 200 {
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

func (w *countingWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

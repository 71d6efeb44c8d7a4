package proxy

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/relay"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

// Defaults for Options fields left zero.
const (
	DefaultDialTimeout       = 10 * time.Second
	DefaultHeaderReadTimeout = 10 * time.Second
	DefaultClientIdleTimeout = 2 * time.Minute
	DefaultTunnelIdleTimeout = time.Hour
	DefaultMaxHeaderBytes    = 64 << 10
)

// Timeouts bound each stage. Zero values take the defaults above; a
// negative value disables that timeout.
type Timeouts struct {
	Dial            time.Duration // direct TCP connect, all addresses together
	UpstreamConnect time.Duration // dial + TLS + CONNECT answer through one member
	HeaderRead      time.Duration // a client's request header (slowloris guard)
	ClientIdle      time.Duration // an idle keep-alive client connection
	TunnelIdle      time.Duration // a tunnel with no data either way
	ResponseHeader  time.Duration // the origin's response header for forwarded requests (0: none)
}

// Resolver is what the proxy needs to look names up.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options are the proxy's fixed settings and dependencies.
type Options struct {
	// Via is the received-by name egret adds to Via headers and uses to
	// detect loops; empty means the host name.
	Via      string
	Timeouts Timeouts
	// MaxHeaderBytes bounds a client's request header; zero means
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// Resolver resolves names for routing and direct dials; nil means the
	// system resolver.
	Resolver Resolver
	// Logger receives operational messages; nil discards them.
	Logger *slog.Logger
	// AccessLog receives one JSON line per request or tunnel, each in a
	// single Write; nil discards them. It must be safe for concurrent use.
	AccessLog io.Writer
	// Metrics records the catalog; nil records nothing.
	Metrics *metrics.Metrics
	// DialContext dials destinations and members by address; nil means a
	// net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Protection holds the client allow-list, the SSRF guard and the limits;
	// the zero value has none.
	Protection Protection
}

// State is the part of the configuration a reload replaces. It is
// immutable once given to a Server.
type State struct {
	Routes      *route.Table
	Pools       map[string]*upstream.Pool
	DefaultPool string // the pool for routes that name none
}

func (st *State) pool(name string) *upstream.Pool {
	if name == "" {
		name = st.DefaultPool
	}
	return st.Pools[name]
}

// Server is the proxy.
type Server struct {
	opts  Options
	log   *slog.Logger
	alog  io.Writer
	m     *metrics.Metrics
	state atomic.Pointer[State]

	transport *http.Transport
	forward   http.Handler
	events    *upstream.Events
	insights  insights

	mu       sync.Mutex
	servers  []*http.Server
	tunnels  map[*relay.Tunnel]string // tunnel → kind
	raw      rawListeners             // transparent and SOCKS5 listeners
	closing  bool
	reaperGo sync.Once
	stop     chan struct{}
}

// New builds a Server with an initial State.
func New(opts Options, st *State) (*Server, error) {
	if st == nil || st.Routes == nil {
		return nil, errors.New("proxy: no routes")
	}
	t := &opts.Timeouts
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&t.Dial, DefaultDialTimeout)
	def(&t.UpstreamConnect, upstream.DefaultConnectTimeout)
	def(&t.HeaderRead, DefaultHeaderReadTimeout)
	def(&t.ClientIdle, DefaultClientIdleTimeout)
	def(&t.TunnelIdle, DefaultTunnelIdleTimeout)
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if opts.Via == "" {
		opts.Via, _ = os.Hostname()
		if opts.Via == "" {
			opts.Via = "egret"
		}
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.DialContext == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		opts.DialContext = d.DialContext
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		m:       opts.Metrics,
		tunnels: map[*relay.Tunnel]string{},
		stop:    make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.alog = opts.AccessLog
	s.events = s.poolEvents()
	s.transport = s.newTransport()
	if err := s.SetState(st); err != nil {
		return nil, err
	}
	s.forward = s.newForwarder()
	return s, nil
}

// SetState replaces the routes and pools; requests already routed keep the
// state they started with.
func (s *Server) SetState(st *State) error {
	if st == nil || st.Routes == nil {
		return errors.New("proxy: no routes")
	}
	for _, r := range st.Routes.Rules() {
		if r.Action == route.Upstream && st.pool(r.Pool) == nil {
			return errors.New("proxy: route " + r.Source + " names a pool that does not exist")
		}
	}
	if d := st.Routes.Default(); d.Action == route.Upstream && st.pool(d.Pool) == nil {
		return errors.New("proxy: the default route names a pool that does not exist")
	}
	for _, p := range st.Pools {
		if p.Events == nil {
			p.Events = s.events
		}
		if p.Credentials != nil {
			p.Credentials.OnRetire(s.RetireConnections)
		}
	}
	old := s.state.Swap(st)
	if old != nil {
		// Connections made through members of the old state must not carry
		// new requests: close the idle ones.
		s.RetireConnections()
	}
	return nil
}

// RetireConnections closes the idle keep-alive connections of forwarded
// requests, so no new request rides a connection made with a member or a
// credential that is no longer in use. Call it after changing members or
// credentials; connections busy now are not reused for the old member or
// credential (their keys no longer match).
func (s *Server) RetireConnections() {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
}

// State returns the current state.
func (s *Server) State() *State { return s.state.Load() }

// Serve accepts HTTP proxy clients on ln until Shutdown. It returns
// http.ErrServerClosed after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	hs := &http.Server{
		Handler:                      s,
		ReadHeaderTimeout:            positive(s.opts.Timeouts.HeaderRead),
		IdleTimeout:                  positive(s.opts.Timeouts.ClientIdle),
		MaxHeaderBytes:               s.opts.MaxHeaderBytes,
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     log.New(slogWriter{s.log}, "", 0),
	}
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.servers = append(s.servers, hs)
	s.mu.Unlock()
	s.NoteListener(ln.Addr())
	s.startReaper()
	return hs.Serve(ln)
}

// Shutdown stops accepting, lets requests in progress and open tunnels
// finish until ctx ends, then closes whatever is left. It returns ctx's
// error if it had to cut anything off.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	servers := append([]*http.Server(nil), s.servers...)
	s.mu.Unlock()
	s.raw.close()
	var wg sync.WaitGroup
	errs := make(chan error, len(servers))
	for _, hs := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- hs.Shutdown(ctx) }()
	}
	wg.Wait()
	close(errs)
	var err error
	for e := range errs {
		if e != nil && err == nil {
			err = e
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for s.OpenTunnels() > 0 || s.raw.active() > 0 {
		select {
		case <-ctx.Done():
			s.raw.abort()
			s.closeTunnels()
			if err == nil {
				err = ctx.Err()
			}
		case <-tick.C:
			continue
		}
		break
	}
	for _, hs := range servers {
		hs.Close()
	}
	s.transport.CloseIdleConnections()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	return err
}

// OpenTunnels returns the number of tunnels relaying now.
func (s *Server) OpenTunnels() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tunnels)
}

func (s *Server) addTunnel(t *relay.Tunnel, kind string) {
	s.mu.Lock()
	s.tunnels[t] = kind
	s.mu.Unlock()
	if s.m != nil {
		s.m.TunnelsOpen.WithLabelValues(kind).Inc()
	}
}

func (s *Server) removeTunnel(t *relay.Tunnel) {
	s.mu.Lock()
	kind, ok := s.tunnels[t]
	delete(s.tunnels, t)
	s.mu.Unlock()
	if ok && s.m != nil {
		s.m.TunnelsOpen.WithLabelValues(kind).Dec()
	}
}

func (s *Server) closeTunnels() {
	s.mu.Lock()
	ts := make([]*relay.Tunnel, 0, len(s.tunnels))
	for t := range s.tunnels {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.Close()
	}
}

// startReaper closes tunnels idle for longer than Timeouts.TunnelIdle.
func (s *Server) startReaper() {
	idle := s.opts.Timeouts.TunnelIdle
	if idle <= 0 {
		return
	}
	s.reaperGo.Do(func() {
		every := min(idle/4, 30*time.Second)
		every = max(every, 10*time.Millisecond)
		go func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-s.stop:
					return
				case now := <-tick.C:
					var stale []*relay.Tunnel
					s.mu.Lock()
					for t := range s.tunnels {
						if now.Sub(t.LastActivity()) > idle {
							stale = append(stale, t)
						}
					}
					s.mu.Unlock()
					for _, t := range stale {
						t.Close()
					}
				}
			}
		}()
	})
}

func positive(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

// slogWriter sends net/http's internal log lines (TLS handshake errors,
// "http: superfluous WriteHeader", ...) to slog at debug level.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug("http server", "detail", string(trimNL(p)))
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

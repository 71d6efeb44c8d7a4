package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/relay"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/transport"
	"egret.io/egret/internal/upstream"
)

// Defaults for Options fields left zero.
const (
	DefaultDialTimeout       = 10 * time.Second
	DefaultHeaderReadTimeout = 10 * time.Second
	DefaultClientIdleTimeout = 2 * time.Minute
	DefaultTunnelIdleTimeout = time.Hour
	DefaultMaxHeaderBytes    = 64 << 10
	// DefaultResponseHeaderTimeout: a member that accepts a forwarded
	// request and never answers is given up on after this (and blamed,
	// when another member answers in its place).
	DefaultResponseHeaderTimeout = 60 * time.Second
)

// Timeouts bound each stage. Zero values take the defaults above; a
// negative value disables that timeout.
type Timeouts struct {
	Dial            time.Duration // direct TCP connect, all addresses together
	UpstreamConnect time.Duration // dial + TLS + CONNECT answer through one member
	HeaderRead      time.Duration // a client's request header (slowloris guard)
	ClientIdle      time.Duration // an idle keep-alive client connection
	TunnelIdle      time.Duration // a tunnel with no data either way
	ResponseHeader  time.Duration // the response header of a forwarded request, from the origin or a member
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
	// OriginTLS configures TLS to the origins of forwarded https:// URLs
	// (ServerName defaults to the URL's host); nil means the system roots.
	OriginTLS *tls.Config
	// Workloads, when set, identifies each client and gives its egress
	// policy (workload.go); nil: every client gets the routes alone.
	Workloads Workloads
	// Intercept, when set, serves admitted CONNECT tunnels to its sites
	// with the interception engine (intercept.go); nil: every tunnel is
	// relayed opaque.
	Intercept *Interception
	// ShortNames is how a gateway treats single-label and "name.ns"
	// destinations (shortnames.go); the zero value resolves them like any
	// other name.
	ShortNames ShortNames
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
	alog  *accessLogger // nil: no access log
	m     *metrics.Metrics
	state atomic.Pointer[State]

	events       *upstream.Events
	insights     insights
	tr           *transport.Transport // dials; keeps the idle connections of forwarded requests
	via10, via11 string               // Via elements
	shortLog     everySecond          // the refused short names' log lines
	onPanic      func(any, []byte)    // relayPanic, bound once
	// dnsOK and dnsErr are the children of the lookup counter, taken once
	// (a label lookup per lookup would allocate); nil without metrics.
	dnsOK, dnsErr prometheus.Counter
	// tunnelGauges are TunnelsOpen's children by kind (tunnelKinds),
	// each taken on its first use (tunnelGauge).
	tunnelGauges [len(tunnelKinds)]atomic.Pointer[prometheus.Gauge]
	// setupObservers are Duration's children by kind and route action
	// (the action's value: 0 for none, Direct, Upstream, Deny), each taken
	// on its first use (setupObserver).
	setupObservers [len(tunnelKinds)][4]atomic.Pointer[prometheus.Observer]

	// ctx is the parent of every connection's context (each connection
	// derives its own once, so a dial registers with its connection's,
	// never with this shared one); Shutdown cancels it when it cuts
	// connections off, and when it returns.
	ctx    context.Context
	cancel context.CancelFunc

	connsMu     sync.Mutex
	conns       map[*clientConn]struct{} // explicit listener's client connections
	draining    atomic.Bool              // Shutdown has begun
	handoff     chan *clientConn         // to idle workers
	idleWorkers atomic.Int32

	mu       sync.Mutex
	tunnels  map[*relay.Tunnel]string // tunnel → kind
	raw      rawListeners             // every listener; transparent and SOCKS5 handshakes
	reaperGo sync.Once
	sweepGo  sync.Once
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
	def(&t.ResponseHeader, DefaultResponseHeaderTimeout)
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
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		m:       opts.Metrics,
		tr:      transport.New(opts.DialContext, opts.OriginTLS),
		via10:   "1.0 " + opts.Via + " (egret)",
		via11:   "1.1 " + opts.Via + " (egret)",
		conns:   map[*clientConn]struct{}{},
		handoff: make(chan *clientConn),
		tunnels: map[*relay.Tunnel]string{},
		stop:    make(chan struct{}),
	}
	// Members' names are egret's to resolve too (EGRET_HOSTS_FILE,
	// EGRET_DNS_SERVERS), not the system's.
	s.tr.Resolver = opts.Resolver
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.onPanic = s.relayPanic
	if s.m != nil {
		s.dnsOK, s.dnsErr = s.m.DNSLookups.WithLabelValues("ok"), s.m.DNSLookups.WithLabelValues("error")
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if opts.AccessLog != nil {
		var dropped prometheus.Counter
		if s.m != nil {
			dropped = s.m.AccessLogDropped
		}
		s.alog = newAccessLogger(opts.AccessLog, s.log, dropped)
	}
	s.events = s.poolEvents()
	if err := s.SetState(st); err != nil {
		return nil, err
	}
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
// credentials; connections busy now are closed when their request ends.
func (s *Server) RetireConnections() {
	if s.tr != nil {
		s.tr.Retire()
	}
}

// Transport returns the transport the server dials with (the probes of
// its pools use it too).
func (s *Server) Transport() *transport.Transport { return s.tr }

// State returns the current state.
func (s *Server) State() *State { return s.state.Load() }

// Shutdown stops accepting, lets requests in progress and open tunnels
// finish until ctx ends, then closes whatever is left. Idle keep-alive
// client connections are closed at once; a connection that finishes its
// request closes instead of waiting for another. It returns ctx's error if
// it had to cut anything off.
func (s *Server) Shutdown(ctx context.Context) error {
	s.connsMu.Lock()
	s.draining.Store(true)
	s.connsMu.Unlock()
	s.raw.close()
	s.tr.Close()
	var err error
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for s.activeConns(time.Now()) > 0 || s.OpenTunnels() > 0 || s.raw.active() > 0 {
		select {
		case <-ctx.Done():
			err = ctx.Err()
			s.cancel() // what still resolves, dials or waits gives up
			s.closeConns()
			s.raw.abort()
			s.closeTunnels()
		case <-tick.C:
			continue
		}
		break
	}
	s.closeConns()
	s.tr.Close()
	s.cancel()
	if s.alog != nil {
		s.alog.flush(2 * time.Second) // the lines of what ended are written
	}
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
		s.tunnelGauge(kind).Inc()
	}
}

// tunnelKinds are the listeners' kinds, in tunnelGauges' order.
var tunnelKinds = [...]string{metrics.KindHTTP, metrics.KindConnect, metrics.KindTransparent, metrics.KindSOCKS}

// tunnelGauge returns the open-tunnels gauge of kind, looked up in the
// vector once per kind (a tunnel adds and removes itself: two label
// lookups per tunnel otherwise).
func (s *Server) tunnelGauge(kind string) prometheus.Gauge {
	for i, k := range tunnelKinds {
		if k != kind {
			continue
		}
		if g := s.tunnelGauges[i].Load(); g != nil {
			return *g
		}
		g := s.m.TunnelsOpen.WithLabelValues(kind)
		s.tunnelGauges[i].Store(&g)
		return g
	}
	return s.m.TunnelsOpen.WithLabelValues(kind)
}

func (s *Server) removeTunnel(t *relay.Tunnel) {
	s.mu.Lock()
	kind, ok := s.tunnels[t]
	delete(s.tunnels, t)
	s.mu.Unlock()
	if ok && s.m != nil {
		s.tunnelGauge(kind).Dec()
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
		go everyUntil(s.stop, every, func(now time.Time) {
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
		})
	})
}

func positive(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/internal/configerr"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// Server is the m2md daemon. Create it with New and run it with Run.
type Server struct {
	cfg     Config
	log     zerolog.Logger
	metrics *metrics
	reqm    *requestMetrics
	neg     *negotiate.Server
	router  *router.Router[peer]
	// affinity maps conversations' documents to the provider that received
	// them (affinity.go).
	affinity *affinityMap
	// cluster is nil unless Config.Cluster enables one.
	cluster *clusterMember
	// tracer records the spans of traced requests; nil: none (trace.go).
	tracer trace.Tracer

	tlsConf     *tls.Config
	fingerprint string

	adm      *admission
	pending  *handshakes // TCP connections not yet through HELLO
	limitLog *logOnce

	draining atomic.Bool
	// routing counts DATA messages being routed right now: between a
	// reply's END leaving the router and the reply entering its
	// requester's queue, the router already counts the request done.
	routing atomic.Int64
	ready   chan struct{}
	crash   chan struct{} // closed by simulateCrash (testhooks.go)
	pool    *writerPool   // runs the sessions' writers (writerpool.go)
	crashed sync.Once

	mu       sync.Mutex
	sessions map[*session]struct{}
	// slots counts the sessions established or being established (from
	// the HELLO's acceptance to the session's end), so that concurrent
	// handshakes cannot take the daemon past MaxSessions.
	slots   int
	conns   sync.WaitGroup // one per accepted connection, handshake included
	baseCtx context.Context
	// handshakes bounds every connection's wait for HELLO; shutdown ends it
	// so that connections that never said HELLO do not hold the drain.
	handshakes     context.Context
	stopHandshakes context.CancelFunc

	quicAddr, wsAddr, wssAddr, adminAddr net.Addr
	// keptBytes is what the frames kept for failover hold (failover.go).
	keptBytes atomic.Int64
	// epoch is the origin of mono: it carries a monotonic clock reading.
	epoch time.Time
}

// New checks cfg, prepares TLS (creating the development certificate if no
// certificate is configured) and returns a Server ready to Run.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	features, err := negotiate.EnabledFeatures(features, cfg.DisableFeatures)
	if err != nil {
		return nil, configerr.New("daemon.Config.DisableFeatures", "%w: daemon.Config.DisableFeatures: %s", ErrConfig, strings.TrimPrefix(err.Error(), negotiate.ErrConfig.Error()+": "))
	}
	neg, err := negotiate.NewServer(negotiate.ServerConfig{
		Features:        features,
		MaxPayload:      cfg.MaxPayload,
		MinSecurity:     cfg.MinSecurity,
		OrgSecrets:      cfg.OrgSecrets,
		ReplayCacheSize: cfg.ReplayCacheSize,
		SessionTimeout:  cfg.SessionTimeout,
		PingInterval:    cfg.PingInterval,
		PongTimeout:     cfg.PongTimeout,
	})
	if errors.Is(err, negotiate.ErrConfig) {
		// The operator set it on the daemon: say so once, not twice, and
		// name the daemon's fields, which carry negotiate's names.
		fields := strings.NewReplacer("negotiate.ServerConfig.", "daemon.Config.")
		msg := fields.Replace(strings.TrimPrefix(err.Error(), negotiate.ErrConfig.Error()+": "))
		var ce *configerr.Error
		if errors.As(err, &ce) {
			return nil, configerr.New(fields.Replace(ce.Field), "%w: %s", ErrConfig, msg)
		}
		return nil, fmt.Errorf("%w: %s", ErrConfig, msg)
	}
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	// negotiate filled in and checked the protocol's settings.
	nc := neg.Config()
	cfg.MaxPayload, cfg.ReplayCacheSize = nc.MaxPayload, nc.ReplayCacheSize
	cfg.ReceiveBudget = cfg.receiveBudget()
	cfg.SessionTimeout, cfg.PingInterval, cfg.PongTimeout = nc.SessionTimeout, nc.PingInterval, nc.PongTimeout
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		metrics:  newMetrics(),
		neg:      neg,
		router:   router.New[peer](router.Config{MaxRequests: cfg.MaxOutstanding, MaxDeliveries: cfg.MaxOutstanding}),
		affinity: newAffinityMap(cfg.AffinityEntries),
		tracer:   tracerOf(cfg.TracerProvider),
		ready:    make(chan struct{}),
		crash:    make(chan struct{}),
		sessions: make(map[*session]struct{}),
		pending:  newHandshakes(cfg.MaxHandshakes, cfg.MaxHandshakesPerIP),
		adm:      newAdmission(cfg.MaxSessionsPerIP, cfg.NewSessionsPerMinute, cfg.openBurst()),
		limitLog: newLogOnce(time.Minute),
		pool:     newWriterPool(),
		epoch:    time.Now(),
	}
	if err := s.setupTLS(); err != nil {
		return nil, err
	}
	s.reqm = newRequestMetrics(s.metrics.registry)
	s.router.SetMarker(s.reqm.mark)
	s.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "m2md_outstanding_requests",
		Help: "Requests delivered to providers whose final reply has not arrived (nor been cancelled).",
	}, func() float64 { return float64(s.Outstanding()) }))
	return s, nil
}

func (s *Server) setupTLS() error {
	var (
		cert tls.Certificate
		err  error
	)
	if s.cfg.CertFile != "" || s.cfg.KeyFile != "" {
		cert, err = certs.Load(s.cfg.CertFile, s.cfg.KeyFile)
		if err != nil {
			return fmt.Errorf("daemon: %w", err)
		}
	} else {
		cert, _, err = certs.EnsureDevCert(s.cfg.CertDir)
		if err != nil {
			return fmt.Errorf("daemon: development certificate: %w", err)
		}
	}
	if len(cert.Certificate) > 0 {
		s.fingerprint = certs.Fingerprint(cert.Certificate[0])
	}
	s.tlsConf = certs.ServerTLSConfig(cert)
	return nil
}

// Fingerprint is the SHA-256 fingerprint (hex) of the daemon's certificate,
// for clients that pin it.
// Outstanding returns the requests delivered to providers whose final reply
// has not arrived and that were not cancelled (m2md_outstanding_requests).
func (s *Server) Outstanding() int { return s.router.Stats().Pending }

// Models returns the models the agents of org serve now (org "" without
// org secrets), sorted: what an OpenAI-compatible GET /v1/models lists.
func (s *Server) Models(org string) []string { return s.router.Models(org) }

func (s *Server) Fingerprint() string { return s.fingerprint }

// Registerer is where components running beside the daemon (the OpenAI
// endpoint) register their metrics, served with the daemon's on /metrics.
func (s *Server) Registerer() prometheus.Registerer { return s.metrics.registry }

// Ready is closed once every listener is bound.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// QUICAddr, WSAddr, WSSAddr and AdminAddr are the bound addresses (useful
// with port 0) once Ready is closed; nil for a disabled listener.
func (s *Server) QUICAddr() net.Addr  { return s.quicAddr }
func (s *Server) WSAddr() net.Addr    { return s.wsAddr }
func (s *Server) WSSAddr() net.Addr   { return s.wssAddr }
func (s *Server) AdminAddr() net.Addr { return s.adminAddr }

func (s *Server) sessionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// takeSlot reserves room for one session; false when MaxSessions are
// established or being established.
func (s *Server) takeSlot() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots >= s.cfg.MaxSessions {
		return false
	}
	s.slots++
	return true
}

func (s *Server) freeSlot() {
	s.mu.Lock()
	s.slots--
	s.mu.Unlock()
}

func enabled(addr string) bool { return addr != "" && addr != "-" }

// Run listens on every configured address and serves until ctx is done, then
// shuts down gracefully: it stops accepting, answers new requests with a
// shutdown error, lets requests in flight finish for up to ShutdownGrace,
// sends CLOSE SERVER_SHUTDOWN to every session behind the replies already
// queued for it, and waits for those to be written (up to ShutdownGrace
// again) and acknowledged (CloseTimeout). It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	s.baseCtx = runCtx
	defer s.pool.close()
	// Before the listeners: every session is registered cluster-wide.
	stopCluster, err := s.startCluster()
	if err != nil {
		return err
	}
	defer stopCluster()
	s.handshakes, s.stopHandshakes = context.WithCancel(runCtx)
	defer s.stopHandshakes()

	ls := &listeners{errc: make(chan error, 4)}
	defer ls.stop()
	if err := s.listen(runCtx, ls); err != nil {
		return err
	}
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		s.sweepAdmissions(runCtx)
	}()
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		s.reclaimMemory(runCtx)
	}()
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		s.pool.retire(runCtx)
	}()
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		s.checkLiveness(runCtx.Done())
	}()
	// Ready once every goroutine of a running daemon exists: tests count
	// goroutines from this moment to find leaks.
	s.logStart()
	close(s.ready)

	select {
	case <-ctx.Done():
	case <-s.crash:
		s.crashStop(ls)
		cancelRun()
		return nil
	case err := <-ls.errc:
		s.log.Error().Err(err).Msg("listener failed; shutting down")
		s.shutdown(ls.closers)
		return err
	}
	s.shutdown(ls.closers)
	ls.closers = nil
	cancelRun()
	return nil
}

// startCluster joins the cluster when one is configured, and returns what
// leaves it.
func (s *Server) startCluster() (stop func(), err error) {
	if !s.cfg.Cluster.Enabled() {
		return func() {}, nil
	}
	cs := newClusterMember(s)
	ccfg := s.cfg.Cluster
	ccfg.Logger = s.log.With().Str("component", "cluster").Logger()
	if ccfg.OrgKey, err = orgAnnounceKeys(s.cfg.OrgSecrets); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	c, err := cluster.Start(ccfg, cs)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	cs.c = c
	s.cluster = cs
	s.registerClusterMetrics()
	return func() { c.Close() }, nil
}

// listeners is what Run started and must stop.
type listeners struct {
	// closers stop the listeners when shutdown begins; adminClosers stop
	// the admin endpoint only after the sessions are gone, so /healthz can
	// report "draining" while requests finish.
	closers, adminClosers []func()
	// unbind frees the QUIC port last: until then it refuses new
	// connections at once and carries the sessions being drained.
	unbind func()
	wg     sync.WaitGroup
	errc   chan error // a listener that failed
}

func (ls *listeners) stop() {
	for _, c := range append(ls.closers, ls.adminClosers...) {
		c()
	}
	ls.wg.Wait()
	if ls.unbind != nil {
		ls.unbind()
	}
}

// listen starts every configured listener: QUIC, ws://, wss:// and the
// admin endpoint.
func (s *Server) listen(runCtx context.Context, ls *listeners) error {
	if enabled(s.cfg.QUICAddr) {
		ln, err := transport.ListenQUIC(s.cfg.QUICAddr, s.tlsConf.Clone(), s.transportConfig())
		if err != nil {
			return fmt.Errorf("daemon: quic: %w", err)
		}
		s.quicAddr = ln.Addr()
		ls.closers = append(ls.closers, func() { ln.Close() })
		ls.unbind = func() { ln.Unbind() }
		ls.wg.Add(1)
		go func() {
			defer ls.wg.Done()
			s.acceptQUIC(runCtx, ln)
		}()
	}
	mux := http.NewServeMux()
	mux.Handle(s.cfg.WSPath, transport.NewWSHandler(s.transportConfig(), func(c transport.Conn) { s.serveConn(c) }))
	var err error
	if enabled(s.cfg.WSAddr) {
		if s.wsAddr, err = s.serveHTTP(ls, "ws", s.cfg.WSAddr, nil, mux, &ls.closers); err != nil {
			return err
		}
	}
	if enabled(s.cfg.WSSAddr) {
		wssTLS := s.tlsConf.Clone()
		wssTLS.NextProtos = []string{"http/1.1"}
		if s.wssAddr, err = s.serveHTTP(ls, "wss", s.cfg.WSSAddr, wssTLS, mux, &ls.closers); err != nil {
			return err
		}
	}
	if enabled(s.cfg.AdminAddr) {
		if s.adminAddr, err = s.serveHTTP(ls, "admin", s.cfg.AdminAddr, nil, s.adminHandler(), &ls.adminClosers); err != nil {
			return err
		}
	}
	return nil
}

// serveHTTP serves h on addr (over TLS when tlsConf is set) and adds its
// graceful stop to closers.
func (s *Server) serveHTTP(ls *listeners, name, addr string, tlsConf *tls.Config, h http.Handler, closers *[]func()) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("daemon: %s: %w", name, err)
	}
	readHeader := 10 * time.Second
	if name != "admin" {
		// Agents' connections count as handshakes until HELLO, and the
		// HTTP upgrade may take no longer than HELLO itself.
		ln = &limitedListener{Listener: ln, h: s.pending, refused: func(limit string, remote net.Addr) {
			s.limitHit(limit, remote, "")
		}}
		readHeader = min(readHeader, s.cfg.HelloTimeout)
	}
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: readHeader, ErrorLog: nil}
	*closers = append(*closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	})
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ls.errc <- fmt.Errorf("daemon: %s: %w", name, err)
		}
	}()
	return ln.Addr(), nil
}

// sweepAdmissions forgets idle per-address admission state until ctx ends.
func (s *Server) sweepAdmissions(ctx context.Context) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			s.adm.sweep(now)
		case <-ctx.Done():
			return
		}
	}
}

// crashStop ends everything as if the process had died: nothing is said
// to anyone; listeners, cluster and connections just stop.
func (s *Server) crashStop(ls *listeners) {
	for _, c := range ls.closers {
		c()
	}
	ls.closers = nil
	if s.cluster != nil {
		s.cluster.c.Abort()
	}
	s.mu.Lock()
	for se := range s.sessions {
		se.conn.Close()
	}
	s.mu.Unlock()
	s.shutdown(nil)
}

// limitHit counts a limit and logs it, once per peer and limit a minute.
func (s *Server) limitHit(limit string, peer net.Addr, session string) {
	s.metrics.limited.WithLabelValues(limit).Inc()
	ip := addrIP(peer).String()
	if s.limitLog.allow(limit+"|"+ip, time.Now()) {
		ev := s.log.Warn().Str("limit", limit).Str("ip", ip)
		if session != "" {
			ev = ev.Str("session", session)
		}
		ev.Msg("limit exceeded (logged once a minute per peer)")
	}
}

func (s *Server) logStart() {
	ev := s.log.Info()
	if s.quicAddr != nil {
		ev = ev.Str("quic", "quic://"+s.quicAddr.String())
	}
	if s.wsAddr != nil {
		ev = ev.Str("ws", "ws://"+s.wsAddr.String()+s.cfg.WSPath)
	}
	if s.wssAddr != nil {
		ev = ev.Str("wss", "wss://"+s.wssAddr.String()+s.cfg.WSPath)
	}
	if s.adminAddr != nil {
		ev = ev.Str("admin", "http://"+s.adminAddr.String())
	}
	if s.cfg.CertFile == "" {
		// Agents of the same user pin this file by default.
		ev = ev.Str("cert", filepath.Join(s.cfg.CertDir, certs.DevCertFile))
	}
	ev.Str("cert_sha256", certs.FormatFingerprint(s.fingerprint)).
		Str("min_security", s.cfg.MinSecurity.String()).
		Msg("m2md listening")
	if len(s.cfg.OrgSecrets) == 0 {
		s.log.Warn().Msg("running OPEN: no org secrets configured, so agents are not authenticated and any client may claim any agent id (set " + fieldOrgSecrets + " for production)")
	}
	if s.cfg.CertFile == "" {
		s.log.Warn().Str("dir", s.cfg.CertDir).Msg("using a self-signed development certificate: clients must pin its fingerprint; the m2md agents of this user pin it from this folder by default (daemon.Config.CertFile/daemon.Config.KeyFile for production)")
	}
}

// transportConfig sizes the transports' receive side from the daemon's
// limits.
func (s *Server) transportConfig() transport.Config {
	return transport.Config{
		ReceiveBudget:       s.cfg.ReceiveBudget,
		MessageTimeout:      s.cfg.MessageTimeout,
		IdleTimeout:         s.cfg.QUICIdleTimeout,
		MaxIncomingChannels: s.cfg.MaxOutstanding,
		// How long a closing QUIC connection waits for the peer to have
		// read its last messages (a REJECT, a CLOSE acknowledgement)
		// before QUIC discards them: as long as the protocol waits for a
		// CLOSE acknowledgement. The transport's 2 s lost the REJECT
		// SERVER_BUSY of a burst of refused HELLOs on a loaded machine,
		// and a client that sees its connection drop instead of
		// SERVER_BUSY retries at once rather than backing off.
		CloseTimeout: s.cfg.CloseTimeout,
	}
}

// sealerChannels bounds a session's channel tables (one Sealer per
// direction) by every channel the session can ever use: the control
// channel, the streams the agent may open (MaxIncomingChannels above:
// MaxOutstanding), and the streams the daemon opens to it, one per delivery
// in flight at most (MaxOutstanding; a stream is reused once its delivery
// ended). Channels are never closed before the connection, so nothing
// needs pruning; a table sized so cannot fill, and no frame is refused or
// dropped for it.
func (s *Server) sealerChannels() int { return 1 + 2*s.cfg.MaxOutstanding }

func (s *Server) acceptQUIC(ctx context.Context, ln *transport.QUICListener) {
	for {
		c, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, transport.ErrClosed) {
				s.log.Warn().Err(err).Msg("quic accept failed")
			}
			return
		}
		go s.serveConn(c)
	}
}

// shutdown carries out the graceful stop described at Run.
func (s *Server) shutdown(closers []func()) {
	// The listeners first: once /healthz says "draining", a new connection
	// is refused (else a load balancer or a test that saw it and dialled at
	// once could find the listener still open and get a connection). A session
	// whose connection was accepted before is drained like the others.
	for _, c := range closers {
		c() // listeners and HTTP servers; accepted sessions live on
	}
	s.mu.Lock()
	s.draining.Store(true)
	s.mu.Unlock()
	s.stopHandshakes()
	s.log.Info().Int("sessions", s.sessionCount()).Msg("shutting down: no new sessions or requests")
	deadline := time.Now().Add(s.cfg.ShutdownGrace)
	for time.Now().Before(deadline) && (s.router.Stats().Pending > 0 || s.routing.Load() > 0) {
		time.Sleep(10 * time.Millisecond)
	}
	if p := s.router.Stats().Pending; p > 0 {
		s.log.Warn().Int("pending", p).Msg("shutdown grace over with requests still in flight")
	}
	s.mu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for se := range s.sessions {
		all = append(all, se)
	}
	s.mu.Unlock()
	for _, se := range all {
		// Behind what is queued: the last replies of the drain go first.
		se.closeAfterQueued(negotiate.ReasonServerShutdown, "daemon shutting down")
	}
	// Each session ends by itself: its writer flushes the replies queued
	// before its CLOSE (a write that makes no progress for
	// SlowConsumerGrace closes it), then waits CloseTimeout for the
	// acknowledgement. The flush is what takes time, megabytes of accepted
	// replies on a loaded machine, so it gets ShutdownGrace again; only a
	// peer trickling its reads could stretch it further, and is cut.
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownGrace + s.cfg.CloseTimeout + time.Second):
		s.mu.Lock()
		left := make([]*session, 0, len(s.sessions))
		for se := range s.sessions {
			left = append(left, se)
		}
		s.mu.Unlock()
		s.log.Warn().Int("sessions", len(left)).Msg("sessions did not close in time; disconnecting them")
		for _, se := range left {
			se.conn.Close()
		}
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	}
	s.neg.Close()
	if s.cluster != nil {
		s.cluster.c.Close()
	}
	s.log.Info().Msg("m2md stopped")
}

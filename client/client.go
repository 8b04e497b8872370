package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/internal/conversation"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// handlerWait bounds how long Close waits for running handlers after
// cancelling their contexts.
const handlerWait = 5 * time.Second

// Client is an agent's connection to the m2md daemon: one session at a
// time, re-established after a loss when Options.Reconnect is set. All
// methods are safe for concurrent use.
type Client struct {
	cfg *config
	log zerolog.Logger
	// dialer replaces the transports' dialling (DialConn, tests).
	dialer func(context.Context) (transport.Conn, error)
	stats  counters

	nextID atomic.Uint64
	// Conversations (docs/protocol.md §4.3): the requester's history and
	// the provider's bases; nil when feature delta is off or their budget
	// is negative.
	hist  *conversation.History
	bases *conversation.Bases

	// life ends with Close; handler contexts derive from it.
	life       context.Context
	lifeCancel context.CancelFunc

	sem      chan struct{} // one slot per running handler
	handlers sync.WaitGroup

	mu      sync.Mutex
	sess    *session      // nil while (re)connecting or over
	changed chan struct{} // closed and replaced whenever sess changes
	final   error         // set once the client is over
	done    chan struct{} // closed once the client is over
	closing bool          // Close has begun

	// nextTarget indexes (mod the count) the daemon URL the next dial uses.
	nextTarget atomic.Int32

	supervisor sync.WaitGroup
	closeOnce  sync.Once
	closeErr   error
}

// Dial connects to the daemon at url and completes the handshake:
// quic://host:port (TLS 1.3; port 4433 if absent), ws://host:port/path or
// wss://host:port/path. It returns once the session is established, or the
// first failure: a dial or TLS error, a *negotiate.RejectError (match with
// errors.Is against negotiate.ErrSecurityPolicy, …), an ACCEPT that does not
// match the HELLO (negotiate.ErrBadAccept, negotiate.ErrAuthDowngrade).
// Dial does not retry unless Options.WaitForDaemon; Options.Reconnect
// applies once connected.
//
// url may list several daemons separated by commas (the nodes of a cluster,
// docs/operations.md): Dial tries each once, in order, and returns the
// first session established or every failure. Reconnection after a lost
// session starts with the URL after the one that was lost and goes round
// the list, one URL per attempt, with the usual backoff between attempts.
func Dial(ctx context.Context, url string, opts Options) (*Client, error) {
	cfg, err := newConfig(url, opts)
	if err != nil {
		return nil, err
	}
	c := newClient(cfg)
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// DialConn is Dial for an agent whose connections to the daemon come from
// dial instead of daemon URLs: a part of the daemon's own process (its
// OpenAI endpoint) attaches with daemon.Server.Attach, and no socket, TLS
// or WebSocket framing lies between them. Reconnection calls dial again.
// Options that concern URLs and TLS are ignored.
func DialConn(ctx context.Context, dial func(context.Context) (transport.Conn, error), opts Options) (*Client, error) {
	if dial == nil {
		return nil, errors.New("client: DialConn needs a dial function")
	}
	cfg, err := newConfigFor([]target{connTarget}, opts)
	if err != nil {
		return nil, err
	}
	c := newClient(cfg)
	c.dialer = dial
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func newClient(cfg *config) *Client {
	c := &Client{
		cfg:     cfg,
		log:     cfg.Logger.With().Str("agent", cfg.AgentID).Logger(),
		sem:     make(chan struct{}, cfg.MaxConcurrentHandlers),
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
	c.life, c.lifeCancel = context.WithCancel(context.Background())
	if slices.Contains(cfg.hello.Features, negotiate.FeatureDelta) {
		if cfg.ConversationHistory > 0 {
			c.hist = conversation.NewHistory(cfg.ConversationHistory)
		}
		if cfg.ConversationBases > 0 {
			c.bases = conversation.NewBases(cfg.ConversationBases)
		}
	}
	return c
}

// run establishes the first session and starts the supervisor.
func (c *Client) run(ctx context.Context) error {
	var errs []error
	for attempt := 0; ; attempt++ {
		errs = errs[:0]
		for range c.cfg.targets {
			s, err := c.connect(ctx) // moves on to the next URL when it fails
			if err == nil {
				c.sess = s
				s.start()
				c.supervisor.Add(1)
				go c.supervise(s)
				return nil
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
		if !c.cfg.WaitForDaemon || ctx.Err() != nil || permanent(errs[len(errs)-1]) {
			break
		}
		c.log.Warn().Err(errs[len(errs)-1]).Int("attempt", attempt+1).Msg("no daemon accepted a session yet; retrying")
		t := time.NewTimer(backoff(attempt, c.cfg.ReconnectMin, c.cfg.ReconnectMax))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
	}
	c.lifeCancel()
	c.cfg.wipe()
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Errorf("client: none of %d daemon URLs accepted a session: %w", len(c.cfg.targets), errors.Join(errs...))
}

// AgentID is this agent's id.
func (c *Client) AgentID() string { return c.cfg.AgentID }

// Done is closed once the client is over: after Close, or when the session
// ended and will not be re-established. Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the client is usable, and afterwards wraps ErrClosed
// and the cause (for instance a *negotiate.CloseError with reason REPLACED).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.final
}

// Session describes the current session; its ID is "" while there is none
// (reconnecting, or over).
func (c *Client) Session() SessionInfo {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s == nil || s.isEnded() {
		return SessionInfo{AgentID: c.cfg.AgentID}
	}
	return s.info
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats { return c.stats.snapshot() }

// current returns the live session, waiting (bounded by ctx) while the
// client reconnects.
func (c *Client) current(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		if c.final != nil {
			err := c.final
			c.mu.Unlock()
			return nil, err
		}
		s, changed := c.sess, c.changed
		c.mu.Unlock()
		if s != nil && !s.isEnded() {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// setSession installs s (nil: none) and wakes the waiters. c.mu is held.
func (c *Client) setSessionLocked(s *session) {
	c.sess = s
	close(c.changed)
	c.changed = make(chan struct{})
}

// finish marks the client as over with err, unless it already is.
func (c *Client) finish(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.final != nil {
		return
	}
	c.final = err
	c.setSessionLocked(nil)
	close(c.done)
}

// supervise waits for the session to end and establishes the next one.
func (c *Client) supervise(s *session) {
	defer c.supervisor.Done()
	for {
		select {
		case <-s.done:
		case <-c.life.Done():
			return // Close shuts the session down
		}
		s.wg.Wait()
		cause := s.endCause()
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return
		}
		c.setSessionLocked(nil)
		c.mu.Unlock()
		if !c.cfg.Reconnect || !reconnectable(cause) {
			c.finish(fmt.Errorf("%w: %w", ErrClosed, cause))
			return
		}
		c.log.Info().Err(cause).Msg("session lost, reconnecting")
		c.rotate() // its daemon may be the one that is gone: try the next first
		var ok bool
		if s, ok = c.reconnect(); !ok {
			return
		}
	}
}

// reconnectable reports whether a session that ended with cause may be
// replaced by a new one: not after CLOSE REPLACED.
func reconnectable(cause error) bool {
	var ce *negotiate.CloseError
	return !errors.As(cause, &ce) || ce.Reason != negotiate.ReasonReplaced
}

// permanent reports a handshake failure that retrying cannot change.
func permanent(err error) bool {
	return errors.Is(err, negotiate.ErrVersionMismatch) ||
		errors.Is(err, negotiate.ErrNoCommonAlgorithm) ||
		errors.Is(err, negotiate.ErrConfig)
}

// reconnect dials with backoff until a session is established (and
// installed), Close is called, or a permanent failure ends the client.
func (c *Client) reconnect() (*session, bool) {
	for attempt := 0; ; attempt++ {
		t := time.NewTimer(backoff(attempt, c.cfg.ReconnectMin, c.cfg.ReconnectMax))
		select {
		case <-t.C:
		case <-c.life.Done():
			t.Stop()
			return nil, false
		}
		s, err := c.connect(c.life)
		if err != nil {
			if c.life.Err() != nil {
				return nil, false
			}
			if permanent(err) {
				c.log.Error().Err(err).Msg("reconnect refused for good")
				c.finish(fmt.Errorf("%w: %w", ErrClosed, err))
				return nil, false
			}
			c.log.Warn().Err(err).Int("attempt", attempt+1).Msg("reconnect failed")
			continue
		}
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			s.end(ErrClosed)
			return nil, false
		}
		c.setSessionLocked(s)
		c.mu.Unlock()
		c.stats.reconnects.Add(1)
		c.log.Info().Int("attempts", attempt+1).Msg("session re-established")
		s.start()
		return s, true
	}
}

// backoff is the delay before reconnection attempt n (0-based): min·2ⁿ
// capped at max, drawn uniformly from its upper half so that agents cut off
// together do not come back together.
func backoff(n int, lo, hi time.Duration) time.Duration {
	d := hi
	if n < 32 && lo<<n > 0 && lo<<n < hi {
		d = lo << n
	}
	return d/2 + rand.N(d/2+1)
}

// Close ends the client: it sends CLOSE CLIENT_SHUTDOWN and waits for the
// daemon's acknowledgement (at most 5 s), closes the connection, fails the
// requests still in flight with ErrClosed, cancels running handlers and
// waits for them (at most 5 s more). It returns an error only when the
// acknowledgement did not come. Later calls return the same result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		s := c.sess
		c.mu.Unlock()
		c.lifeCancel()
		if s != nil && !s.isEnded() {
			c.closeErr = s.shutdown(negotiate.ReasonClientShutdown, ErrClosed)
		} else if s != nil {
			s.wg.Wait()
		}
		c.supervisor.Wait()
		c.finish(ErrClosed)
		c.waitHandlers()
		c.cfg.wipe()
	})
	return c.closeErr
}

// waitHandlers waits for running handlers, at most handlerWait.
func (c *Client) waitHandlers() {
	done := make(chan struct{})
	go func() {
		c.handlers.Wait()
		close(done)
	}()
	t := time.NewTimer(handlerWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.log.Warn().Msg("handlers still running after Close; they ignore their context")
	}
}

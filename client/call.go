package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/conversation"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// CallOption adjusts one request.
type CallOption func(*callOptions)

type callOptions struct {
	to          string
	tokenNative bool
	once        bool
	headers     bool
}

// ResponseHeaders asks the provider for its model server's response
// headers (docs/protocol.md §4.7, set with frame.SetWantsHeaders);
// a provider that sends them (m2md upstream) does so before any other
// reply, and Stream.Headers returns them. Not with TokenNative.
func ResponseHeaders() CallOption {
	return func(o *callOptions) { o.headers = true }
}

// Once marks the request ONCE (feature once, docs/protocol.md §4,
// "Failover"): the daemon delivers it to one provider at most, and does
// not deliver it again to another when that provider is lost before
// replying; the request then fails with agent_gone. Use it for requests
// that must not run twice (they act on the world, or cost too much). The
// session must have negotiated feature once; if it has not, the request
// is not sent and the error wraps negotiate.ErrConfig.
func Once() CallOption {
	return func(o *callOptions) { o.once = true }
}

// TokenNative sends the request as a TokenNative frame (BPE token ids in
// the session's negotiated encoding) instead of an M2M v1 frame. TokenNative
// frames carry no routing header, so the request must be addressed with To;
// the session must have negotiated tokennative (in mode none, or sealed in
// hmac and aead sessions with the feature tn_sealed, docs/protocol.md §4.2).
func TokenNative() CallOption {
	return func(o *callOptions) { o.tokenNative = true }
}

// To addresses the request to one agent instead of any agent serving the
// model named in the body.
func To(agentID string) CallOption {
	return func(o *callOptions) { o.to = agentID }
}

// Response is the answer to Do.
type Response struct {
	// From is the agent that answered.
	From string
	// Body is the final reply's JSON.
	Body []byte
	// Chunks are the replies that came before the final one (a provider
	// that streamed), in order; nil for a plain response.
	Chunks [][]byte
}

// reply is one received reply frame, verified, waiting to be decoded.
type reply struct {
	msg   transport.Message
	frame []byte // the plain frame, inside msg
	peer  []byte // inside msg
	end   bool
	batch bool  // the frame's JSON is a batch of chunks (negotiate.SplitBatch)
	err   error // the frame was refused (ErrBadFrame)
}

// call is a request waiting for its replies. The reader pushes; one
// consumer (Stream.Recv) takes.
type call struct {
	s      *session
	id     uint64
	ch     transport.ChannelID
	limit  int
	notify chan struct{}

	mu        sync.Mutex
	queue     []reply
	inline    [1]reply // the queue's first array: a plain response needs no other
	queued    int      // bytes of frames in queue
	from      string
	err       error // after the queue drains, what Recv returns
	abandoned bool
	ended     bool        // the END arrived
	unwatch   func() bool // stops the context watch (see watch)
}

func newCall(s *session, id uint64, ch transport.ChannelID) *call {
	cl := &call{}
	cl.init(s, id, ch)
	return cl
}

func (cl *call) init(s *session, id uint64, ch transport.ChannelID) {
	cl.s, cl.id, cl.ch, cl.limit = s, id, ch, s.c.cfg.StreamBuffer
	cl.notify = make(chan struct{}, 1)
	cl.queue = cl.inline[:0]
}

func (cl *call) signal() {
	select {
	case cl.notify <- struct{}{}:
	default:
	}
}

// push queues a reply; a reply nobody waits for is dropped.
func (cl *call) push(r reply) {
	cl.mu.Lock()
	if cl.abandoned || cl.err != nil {
		cl.mu.Unlock()
		r.msg.Release()
		cl.s.c.stats.late.Add(1)
		return
	}
	if cl.from == "" && len(r.peer) > 0 {
		cl.from = string(r.peer)
	}
	if len(cl.queue) > 0 && cl.queued+len(r.frame) > cl.limit {
		cl.err = fmt.Errorf("%w: more than %d bytes waiting", ErrSlowConsumer, cl.limit)
		cl.mu.Unlock()
		r.msg.Release()
		cl.s.c.stats.late.Add(1)
		cl.signal()
		return
	}
	cl.queue = append(cl.queue, r)
	cl.queued += len(r.frame)
	cl.mu.Unlock()
	cl.signal()
}

// fail ends the call with err once the queued replies are read.
func (cl *call) fail(err error) {
	cl.mu.Lock()
	if cl.err == nil {
		cl.err = err
	}
	cl.mu.Unlock()
	cl.signal()
}

// next waits for the next reply.
func (cl *call) next(ctx context.Context) (reply, error) {
	for {
		cl.mu.Lock()
		if len(cl.queue) > 0 {
			r := cl.queue[0]
			cl.queue[0] = reply{}
			cl.queue = cl.queue[1:]
			if len(cl.queue) == 0 {
				cl.queue = cl.inline[:0]
			}
			cl.queued -= len(r.frame)
			cl.mu.Unlock()
			return r, nil
		}
		err := cl.err
		cl.mu.Unlock()
		if err != nil {
			return reply{}, err
		}
		select {
		case <-cl.notify:
		case <-ctx.Done():
			return reply{}, ctx.Err()
		}
	}
}

// abandon drops what is queued; replies still to come are dropped as they
// arrive. The call stays registered until its END, which returns the
// channel to the pool: a channel with a request outstanding must not carry
// the next one. A request whose END has not arrived is cancelled
// (sendCancel), so the provider stops and the END comes at once.
func (cl *call) abandon() {
	cl.mu.Lock()
	if cl.abandoned {
		cl.mu.Unlock()
		return
	}
	cl.abandoned = true
	if cl.err == nil {
		cl.err = errStreamClosed
	}
	q := cl.queue
	cl.queue, cl.queued = nil, 0
	ended, stop := cl.ended, cl.unwatch
	cl.unwatch = nil
	cl.mu.Unlock()
	cl.signal()
	for i := range q {
		q[i].msg.Release()
	}
	if stop != nil {
		stop()
	}
	if !ended {
		cl.s.sendCancel(cl)
	}
}

// errStreamClosed is what a Recv blocked during Stream.Close returns.
var errStreamClosed = errors.New("client: stream closed")

func (cl *call) sender() string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.from
}

// Stream is a request's sequence of replies: stream chunks, then the final
// reply. It is not safe for concurrent use, except Close.
type Stream struct {
	ctx  context.Context
	cl   *call // replaced (under mu) by a resend after base_missing
	err  error // sticky: io.EOF after the final reply, or the failure
	once sync.Once
	// pending are the chunks of a batch reply not yet returned.
	pending [][]byte
	call    call // cl points here: one allocation per request

	to   string             // the To address, for a resend
	turn *conversation.Turn // the request's extension block, when it has one
	// wantHeaders: the request asked for a headers reply (ResponseHeaders),
	// held in headers once it came.
	wantHeaders bool
	headers     []byte
	mu          sync.Mutex
	closed      bool // Close ran: a resend must not replace cl
}

// Recv returns the next reply's JSON, decoded. After the final reply it
// returns io.EOF. An error reply (schema 0x10) is returned as a *RemoteError
// and ends the stream, as does any other error: ErrConnectionLost, ErrClosed,
// ErrBadFrame (the frame did not verify or decode), ErrSlowConsumer, or the
// context's error. Each error is returned again by later calls.
func (st *Stream) Recv() ([]byte, error) {
	body, _, err := st.recv()
	return body, err
}

// Next is Recv that also says whether the reply is the final one (END), so
// a caller can tell a provider's single answer from a first stream chunk
// without waiting for the next reply.
func (st *Stream) Next() (body []byte, final bool, err error) { return st.recv() }

func (st *Stream) recv() (body []byte, end bool, err error) {
	if st.err != nil {
		return nil, false, st.err
	}
	if len(st.pending) > 0 {
		body = st.pending[0]
		st.pending[0] = nil
		st.pending = st.pending[1:]
		if st.turn != nil {
			st.turn.Reply(body, false)
		}
		return body, false, nil
	}
	for {
		r, err := st.cl.next(st.ctx)
		if err != nil {
			st.finish(err)
			return nil, false, err
		}
		if st.wantHeaders && st.headers == nil && !r.end && !r.batch && r.err == nil && frame.IsHeadersReply(r.frame) {
			// The provider's headers: not a chunk of the answer, nor part
			// of the conversation's base (docs/protocol.md §4.7).
			if st.headers, err = st.cl.s.decodeReply(r, st.lim(), nil); err != nil {
				st.finish(err)
				return nil, false, err
			}
			continue
		}
		body, err = st.cl.s.decodeReply(r, st.lim(), st.turn)
		if err != nil && st.turn != nil && resendable(st.turn, err) {
			// The provider or the daemon lacks the delta's base: the same
			// document again, in full, transparently (docs/protocol.md §4.3).
			if err = st.resend(); err == nil {
				continue
			}
		}
		if err == nil && r.batch {
			// Several stream chunks in one reply (docs/protocol.md §4.4).
			st.pending, err = negotiate.SplitBatch(st.pending[:0], body)
			if err != nil {
				err = fmt.Errorf("%w: %w", ErrBadFrame, err)
			} else {
				body, st.pending = st.pending[0], st.pending[1:]
			}
		}
		switch {
		case err != nil:
			st.finish(err)
			return nil, false, err
		case st.turn != nil:
			st.turn.Reply(body, r.end)
		}
		if r.end {
			st.finish(io.EOF)
		}
		return body, r.end, nil
	}
}

// Buffered is the number of replies that have arrived and wait to be read:
// so many Next calls return without waiting. A relay can write what is
// buffered and flush once, instead of once per reply.
func (st *Stream) Buffered() int {
	if st.err != nil {
		return 0
	}
	st.cl.mu.Lock()
	defer st.cl.mu.Unlock()
	return len(st.pending) + len(st.cl.queue)
}

func (st *Stream) lim() frame.Limits { return st.cl.s.decLim }

// From is the agent that answered; "" before the first reply, or when only
// the daemon answered.
func (st *Stream) From() string { return st.cl.sender() }

// Headers returns the provider's headers reply (a JSON object of header
// names and values) when the request asked for it with ResponseHeaders and
// the provider sent one; nil otherwise. It is there once Next has returned
// the first reply or an error.
func (st *Stream) Headers() []byte { return st.headers }

// Close abandons the stream: replies still queued or to come are dropped,
// and a request whose final reply has not arrived is cancelled at its
// provider (when the session negotiated feature cancel). It is safe to call
// more than once and at the same time as Recv.
func (st *Stream) Close() error {
	st.once.Do(func() {
		st.mu.Lock()
		st.closed = true
		cl := st.cl
		st.mu.Unlock()
		cl.abandon()
	})
	return nil
}

func (st *Stream) finish(err error) {
	st.err = err
	st.Close()
}

// decodeReply turns a queued reply into JSON, or into the error it carries,
// and releases its buffer. t is the request's turn, nil when it carried no
// extension block: only such a request may be answered by a reply delta.
func (s *session) decodeReply(r reply, lim frame.Limits, t *conversation.Turn) ([]byte, error) {
	defer r.msg.Release()
	if r.err != nil {
		return nil, r.err
	}
	if !isM2M(r.frame) {
		return s.decodeTokenNative(r.frame)
	}
	if r.frame[frame.OffSchema] == byte(frame.SchemaError) {
		return nil, decodeErrorFrame(string(r.peer), r.frame, lim)
	}
	body, err := frame.AppendDecode(nil, r.frame, lim)
	if errors.Is(err, frame.ErrDelta) {
		// A reply delta (docs/protocol.md §4.3): rebuilt against the
		// request it answers; a failure is the provider's, not resent.
		if body, err = decodeReplyDelta(t, r.frame, lim); err == nil {
			s.c.stats.replyDeltasReceived.Add(1)
		}
	}
	if err != nil {
		s.c.stats.badFrames.Add(1)
		return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	s.c.stats.jsonReceived.Add(uint64(len(body)))
	return body, nil
}

// Do sends a request and returns its final reply. body is the request's
// JSON (an OpenAI-style chat request: its "model" routes it to an agent
// serving that model, unless To names the agent). Chunks a provider streams
// before its final reply are collected in Response.Chunks, up to
// Options.MaxResponseSize in all.
//
// Errors: a *RemoteError for an error reply (errors.As), ErrConnectionLost
// when the session ended first, ErrClosed after Close, ErrBadFrame for a
// reply that did not verify or decode, ErrTooLarge, the context's error.
// Do does not retry.
func (c *Client) Do(ctx context.Context, body []byte, opts ...CallOption) (*Response, error) {
	st, err := c.Stream(ctx, body, opts...)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	resp := &Response{}
	total := 0
	for {
		b, end, err := st.recv()
		if err != nil {
			return nil, err
		}
		total += len(b)
		if total > c.cfg.MaxResponseSize {
			return nil, fmt.Errorf("%w: response above %d bytes", ErrTooLarge, c.cfg.MaxResponseSize)
		}
		if end {
			resp.From, resp.Body = st.From(), b
			return resp, nil
		}
		resp.Chunks = append(resp.Chunks, b)
	}
}

// Stream sends a request and returns its replies one by one, for providers
// that stream (Do collects them instead). ctx bounds the whole stream, not
// just this call: when it ends before the final reply, the request is
// cancelled at its provider (docs/protocol.md §4.1). Close the Stream when done with it, whether or not Recv
// reached io.EOF.
func (c *Client) Stream(ctx context.Context, body []byte, opts ...CallOption) (*Stream, error) {
	return c.start(ctx, body, false, opts)
}

// SendFrame sends a pre-encoded binary frame as a request and returns its
// replies. An M2M v1 frame must be plain (security byte 00): it gets its
// channel's sequence number and the session's protection like any request,
// but is otherwise sent as it is, so tests can send payloads that do not
// decode. Other bytes (a TokenNative frame) are sent unchanged and need
// security mode none. frame is not retained. A frame with an extension
// block (docs/protocol.md §4.3) may be answered by a reply delta, which the
// Stream cannot rebuild (it has not kept the document): it fails with
// ErrBadFrame.
func (c *Client) SendFrame(ctx context.Context, frame []byte, opts ...CallOption) (*Stream, error) {
	return c.start(ctx, frame, true, opts)
}

// start sends one request and registers it for its replies.
func (c *Client) start(ctx context.Context, payload []byte, raw bool, opts []CallOption) (*Stream, error) {
	var co callOptions
	for _, o := range opts {
		o(&co)
	}
	s, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	var flags negotiate.DataFlags
	if co.once {
		if !s.info.Params.Has(negotiate.FeatureOnce) {
			return nil, fmt.Errorf("%w: Once: the daemon did not negotiate feature once (an older daemon, or --disable-features once), so it cannot be told not to resend", negotiate.ErrConfig)
		}
		flags = negotiate.FlagOnce
	}
	id := c.newRequestID()
	var tb [negotiate.MaxTraceLen]byte
	o, err := newTracedOutgoing(flags, id, co.to, s.appendTrace(tb[:0], ctx), len(payload))
	if err != nil {
		return nil, err
	}
	defer o.free()
	st := &Stream{ctx: ctx, to: co.to, wantHeaders: co.headers && !co.tokenNative}
	switch {
	case raw:
		*o.buf = append(*o.buf, payload...)
	case co.tokenNative:
		if err := s.encodeTokenNative(o, payload, co.to); err != nil {
			return nil, err
		}
	default:
		if st.turn, err = s.encodeRequest(o, payload); err != nil {
			return nil, err
		}
	}
	if st.wantHeaders {
		if err := frame.SetWantsHeaders((*o.buf)[o.hdrLen:]); err != nil {
			return nil, fmt.Errorf("client: ResponseHeaders: %w", err)
		}
	}
	st.cl = &st.call
	if err := s.launch(ctx, st.cl, id, o); err != nil {
		return nil, err
	}
	c.stats.requests.Add(1)
	if !raw {
		c.stats.jsonSent.Add(uint64(len(payload)))
	}
	st.cl.watch(ctx, st)
	return st, nil
}

// launch sends request o, numbered id, on a channel of its own and
// registers cl for its replies.
func (s *session) launch(ctx context.Context, cl *call, id uint64, o outgoing) error {
	ch, err := s.conn.AcquireChannel(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.sendErr()
	}
	cl.init(s, id, ch)
	if err := s.addCall(cl); err != nil {
		s.conn.ReleaseChannel(ch)
		return err
	}
	if err := s.sendMessage(ch, o); err != nil {
		s.removeCall(cl)
		// Ignored by the transport if the channel broke mid-write.
		s.conn.ReleaseChannel(ch)
		return err
	}
	return nil
}

// newRequestID returns the next request id: per client, never 0.
func (c *Client) newRequestID() uint64 {
	for {
		if id := c.nextID.Add(1); id != 0 {
			return id
		}
	}
}

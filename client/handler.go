package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/conversation"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// Handler serves the requests the daemon delivers to this agent.
//
// ServeM2M runs in its own goroutine, at most Options.MaxConcurrentHandlers
// at a time. It answers through w: any number of Chunk calls, then Respond
// or Error. If it returns without either, the requester gets error
// no_response; if it panics, handler_panic. ctx is cancelled when the
// delivery ends early (the daemon's notice: the requester is gone, its queue
// is full; the session ended; the client is closing): the handler should
// then return promptly, as writes fail with ErrDeliveryCancelled anyway.
type Handler interface {
	ServeM2M(ctx context.Context, req *Request, w ResponseWriter)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Request, w ResponseWriter)

// ServeM2M calls f.
func (f HandlerFunc) ServeM2M(ctx context.Context, req *Request, w ResponseWriter) { f(ctx, req, w) }

// Request is a request delivered to this agent.
type Request struct {
	// From is the requester's agent id.
	From string
	// ID is the daemon's number for this delivery (for logs).
	ID uint64
	// Model is the model named in the frame's routing header; "" when the
	// request was addressed to this agent without one.
	Model string
	// Stream reports that the request asked for streaming ("stream": true).
	Stream bool
	// Embeddings reports an embeddings request: a frame of schema 04
	// (EmbeddingRequest), as the OpenAI ingress sends for /v1/embeddings.
	Embeddings bool
	// API is the HTTP API the body is a request of, from the API byte of
	// a request frame (docs/protocol.md §4.6): frame.APIChat unless the
	// requester named another. A handler that does not serve it refuses
	// the request (code unsupported_api) rather than read the body as
	// another API's.
	API frame.API
	// WantsHeaders reports that the requester asked for the model
	// server's response headers (docs/protocol.md §4.7): a handler that
	// has them sends them with HeaderWriter.Headers before any other
	// reply.
	WantsHeaders bool
	// Body is the request's JSON, decoded; the handler owns it.
	Body []byte
}

// ResponseWriter answers one delivered request. Its methods are safe for
// concurrent use; each returns once the reply is written to the transport.
type ResponseWriter interface {
	// Chunk sends a stream chunk (a reply without END).
	Chunk(json []byte) error
	// Chunks sends stream chunks, in order, as Chunk would one by one.
	// When the requester takes batches (both sessions negotiated feature
	// batch, docs/protocol.md §4.4) they travel together in as few
	// replies as fit: one Brotli stream and one message instead of one
	// per chunk. A relay passes on what it has already received, never
	// waiting for more, so that a token-paced stream is not delayed.
	Chunks(jsons ...[]byte) error
	// Respond sends the final reply (END).
	Respond(json []byte) error
	// Error sends an error reply (schema 0x10, END) with an OpenAI-style
	// body {"error":{"message":…,"type":"m2md_error","code":…}}; the
	// requester gets it as a *RemoteError. Code is one of negotiate's
	// codes or one of the provider's own ("error" when empty).
	Error(code negotiate.ErrorCode, message string) error
}

// HeaderWriter is what a ResponseWriter of this package also implements:
// the headers reply of docs/protocol.md §4.7.
type HeaderWriter interface {
	// Headers sends the model server's response headers, a JSON object of
	// names and string values, as the headers reply: only to a request
	// whose WantsHeaders is set, once, before any other reply (else
	// ErrResponded).
	Headers(json []byte) error
}

// delivery is one request being served.
type delivery struct {
	s    *session
	id   uint64
	ch   transport.ChannelID
	from string
	ctx  context.Context
	stop context.CancelCauseFunc

	// batch: the daemon marked the delivery BATCH (the requester takes
	// batches of chunks).
	batch bool

	mu    sync.Mutex
	wrote bool                    // a reply was sent: too late for headers
	done  bool                    // the final reply was sent
	rec   *conversation.Recording // kept as a base once answered (feature delta)
	// reply is what a reply delta is encoded against, when the request
	// came with an extension block (feature delta); nil otherwise.
	reply *replyDict
}

func newDelivery(s *session, id uint64, ch transport.ChannelID, from string) *delivery {
	ctx, stop := context.WithCancelCause(s.c.life)
	return &delivery{s: s, id: id, ch: ch, from: from, ctx: ctx, stop: stop}
}

// cancel ends the delivery early with cause (nil: it finished).
func (d *delivery) cancel(cause error) { d.stop(cause) }

func (d *delivery) Chunk(json []byte) error {
	return d.write(negotiate.FlagReply, json, "", "")
}

func (d *delivery) Chunks(jsons ...[]byte) error {
	for len(jsons) > 0 {
		// As many chunks as fit negotiate.MaxBatchJSON; a chunk too
		// large for a batch goes alone.
		n, size := 1, len(jsons[0])+2
		for n < len(jsons) && size+len(jsons[n])+1 <= negotiate.MaxBatchJSON {
			size += len(jsons[n]) + 1
			n++
		}
		var err error
		if n == 1 || !d.batch {
			for _, j := range jsons[:n] {
				if err = d.Chunk(j); err != nil {
					break
				}
			}
		} else {
			err = d.writeBatch(jsons[:n], size)
		}
		if err != nil {
			return err
		}
		jsons = jsons[n:]
	}
	return nil
}

func (d *delivery) writeBatch(jsons [][]byte, size int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	for _, j := range jsons {
		if d.rec == nil {
			break
		}
		// The requester receives them one by one, and so keeps them.
		d.record(j, "", false)
	}
	d.wrote = true
	err := d.s.sendBatch(d.ch, d.id, jsons, size)
	if err != nil && d.ctx.Err() != nil {
		return d.cancelledErr()
	}
	return err
}

func (d *delivery) Respond(json []byte) error {
	return d.write(negotiate.FlagReply|negotiate.FlagEnd, json, "", "")
}

func (d *delivery) Error(code negotiate.ErrorCode, message string) error {
	if code == "" {
		code = "error"
	}
	return d.write(negotiate.FlagReply|negotiate.FlagEnd, nil, code, message)
}

func (d *delivery) write(flags negotiate.DataFlags, json []byte, code negotiate.ErrorCode, message string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	if d.rec != nil {
		// Kept before it is sent: the requester's next turn, a delta
		// against it, may arrive as soon as the reply has left.
		d.record(json, code, flags&negotiate.FlagEnd != 0)
	}
	d.wrote = true
	var err error
	switch {
	case code != "":
		err = d.s.sendError(d.ch, d.id, code, message)
	case d.reply != nil && flags&negotiate.FlagEnd != 0:
		err = d.s.sendFinal(d.ch, d.id, json, d.reply)
		d.reply = nil
	default:
		err = d.s.sendJSON(d.ch, flags, d.id, json)
	}
	switch {
	case err == nil && flags&negotiate.FlagEnd != 0:
		d.done = true
	case err != nil && d.ctx.Err() != nil:
		// The delivery ended while the reply was going out.
		return d.cancelledErr()
	}
	return err
}

// Headers sends the headers reply (HeaderWriter). It is not kept in the
// conversation's base: the requester does not keep it either.
func (d *delivery) Headers(json []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	if d.wrote {
		return ErrResponded
	}
	d.wrote = true
	err := d.s.sendHeaders(d.ch, d.id, json)
	if err != nil && d.ctx.Err() != nil {
		return d.cancelledErr()
	}
	return err
}

// writable says why the handler may no longer write, if it may not; d.mu
// is held.
func (d *delivery) writable() error {
	if d.done {
		// After a CANCEL or a notice this side's END may be out already
		// (end): the handler learns why it was stopped.
		if cause := context.Cause(d.ctx); errors.Is(cause, ErrDeliveryCancelled) {
			return cause
		}
		return ErrResponded
	}
	if d.ctx.Err() != nil {
		return d.cancelledErr()
	}
	return nil
}

func (d *delivery) cancelledErr() error {
	cause := context.Cause(d.ctx)
	if errors.Is(cause, ErrDeliveryCancelled) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrDeliveryCancelled, cause)
}

func (d *delivery) finished() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done
}

// serve decodes a delivered request and runs the handler on it.
func (s *session) serve(d *delivery, msg transport.Message, plain []byte) {
	c := s.c
	defer func() {
		d.cancel(nil)
		s.removeDelivery(d)
		<-c.sem
		c.handlers.Done()
	}()
	req, code, err := s.decodeRequest(d, msg, plain)
	if err != nil {
		if werr := d.Error(code, err.Error()); werr != nil {
			s.log.Debug().Err(werr).Msg("could not refuse delivery")
		}
		return
	}
	if s.runHandler(d, req) {
		return
	}
	if !d.finished() && d.ctx.Err() == nil {
		d.Error(negotiate.CodeNoResponse, "the handler returned without a final reply")
	}
}

// runHandler calls the handler, turning a panic into an error reply; it
// reports whether the handler panicked.
func (s *session) runHandler(d *delivery, req *Request) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			buf := make([]byte, 4096)
			buf = buf[:runtime.Stack(buf, false)]
			s.log.Error().Interface("panic", p).Bytes("stack", buf).Uint64("delivery", d.id).Msg("handler panicked")
			d.Error(negotiate.CodeHandlerPanic, "the handler failed")
			panicked = true
		}
	}()
	s.c.cfg.Handler.ServeM2M(d.ctx, req, d)
	return false
}

// decodeRequest decodes a delivered frame and releases its message. The
// code is what to answer when it fails.
func (s *session) decodeRequest(d *delivery, msg transport.Message, plain []byte) (*Request, negotiate.ErrorCode, error) {
	defer msg.Release()
	if !isM2M(plain) {
		body, err := s.decodeTokenNative(plain)
		if err != nil {
			return nil, negotiate.CodeBadFrame, err
		}
		return &Request{From: d.from, ID: d.id, Body: body}, "", nil
	}
	var h frame.Header
	if err := frame.ReadHeader(plain, &h); err != nil {
		return nil, negotiate.CodeBadFrame, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	body, code, err := s.decodeDelivery(d, plain, &h)
	switch {
	case code == negotiate.CodeBaseMissing:
		return nil, code, err
	case err != nil:
		s.c.stats.badFrames.Add(1)
		return nil, code, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	s.c.stats.jsonReceived.Add(uint64(len(body)))
	return &Request{
		From:       d.from,
		ID:         d.id,
		Model:      string(h.Model),
		Stream:     (h.Schema == frame.SchemaRequest || h.Schema == frame.SchemaEmbeddingRequest) && h.Flags.StreamRequested(),
		Embeddings: h.Schema == frame.SchemaEmbeddingRequest,
		API:        requestAPI(&h),
		WantsHeaders: (h.Schema == frame.SchemaRequest || h.Schema == frame.SchemaEmbeddingRequest) &&
			h.Flags.WantsHeaders(),
		Body: body,
	}, "", nil
}

// requestAPI is the API byte of a request frame; other schemas carry none.
func requestAPI(h *frame.Header) frame.API {
	if h.Schema != frame.SchemaRequest {
		return frame.APIChat
	}
	return h.Flags.API()
}

package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// The peer role of an agent connected here (*session): what is routed to
// it goes to its writer's queue, protected afresh for its connection, and
// what it cannot take is refused with the error its requester or provider
// would otherwise wait for.

func (se *session) name() string                              { return se.agent }
func (se *session) homeNode() string                          { return "" }
func (se *session) marksSlot() *atomic.Pointer[providerMarks] { return &se.marks }

// mayHoldBase: only an agent that negotiated feature delta can take a
// document's deltas.
func (se *session) mayHoldBase() bool { return se.delta }

// origin is the session as the requester of what it sends.
func (se *session) origin() origin {
	return origin{org: se.neg.Org, agent: se.agent, batch: se.takesBatches()}
}

// takeRequest hands a request routed to the agent to its queue, addressed
// from its requester; a provider without feature trace gets the request
// without its trace context.
func (se *session) takeRequest(d router.Delivery[peer], from origin, fr []byte, format frameFormat, trace traced, start time.Time) {
	srv := se.srv
	fail := func(code negotiate.ErrorCode, message string) {
		srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
		if rep, err := srv.abort(d.Provider, d.ID); err == nil {
			rep.Requester.Value().sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, code, message, se.agent)
		}
	}
	if format == formatTokenNative && !se.takesTokenNative() {
		fail(negotiate.CodeBadFrame, "provider's session is protected without tn_sealed, so it cannot take a TokenNative frame")
		return
	}
	// A request with the extension block goes to a provider without
	// feature delta without it (docs/protocol.md §4.3); a delta cannot.
	strip := format == formatM2M && hasExtension(fr) && !se.delta
	if n, limit := se.outLen(fr, format), se.neg.Params.MaxPayload; n > limit {
		// Sent anyway, it would break the provider's connection (its read
		// limit is max_payload + 512) or hand it more than it agreed to.
		fail(negotiate.CodeTooLarge, fmt.Sprintf("frame of %d bytes exceeds provider %s's max_payload %d", n, se.agent, limit))
		return
	}
	// Take a free channel or open one, but never wait for one: a QUIC
	// provider's stream limit is how many deliveries it takes in flight, and
	// waiting here would stall this whole session's read loop (its other
	// requests, its replies, its PONGs) behind one busy provider. With an
	// ended context AcquireChannel still returns an idle or new channel and
	// fails only where it would have waited.
	pch, err := se.conn.AcquireChannel(endedCtx)
	if err != nil {
		if errors.Is(err, context.Canceled) && se.ctx.Err() == nil {
			fail(negotiate.CodeProviderBusy, "provider "+se.agent+" has no free channel: as many requests in flight as it accepts streams")
		} else {
			fail(negotiate.CodeAgentGone, "no channel to provider "+se.agent)
		}
		return
	}
	// Only a request that reaches its provider with the block may be
	// answered by a reply delta (docs/protocol.md §4.3).
	ext := format == formatM2M && se.delta && hasExtension(fr)
	srv.router.SetProviderChannel(d.Provider, d.ID, uint64(pch), ext)
	var flags negotiate.DataFlags
	if from.batch && se.takesBatches() {
		flags = negotiate.FlagBatch
	}
	if len(trace.block) > 0 && !se.neg.Params.Has(negotiate.FeatureTrace) {
		trace.block = nil
	}
	m, ok := buildTracedData(pch, flags, d.ID, from.agent, trace.block, fr, format)
	if !ok {
		se.conn.ReleaseChannel(pch)
		fail(negotiate.CodeBadFrame, "request cannot be addressed")
		return
	}
	if strip {
		// In the copy, which the writer protects afresh for the provider.
		b := *m.buf
		stripped, err := frame.StripExtension(b[m.frameOff:])
		if err != nil {
			m.free()
			se.conn.ReleaseChannel(pch)
			if errors.Is(err, frame.ErrDelta) {
				srv.metrics.deltaRoutes[2].Inc()
				fail(negotiate.CodeBaseMissing, "provider "+se.agent+" did not negotiate feature delta, so it cannot hold the base of this delta: resend the full document")
			} else {
				fail(negotiate.CodeBadFrame, "request's extension block cannot be removed for provider "+se.agent)
			}
			return
		}
		*m.buf = b[:m.frameOff+len(stripped)]
	}
	if trace.span != nil {
		trace.span.queued = time.Now()
		m.span = trace.span
	}
	if !se.enqueue(m) {
		m.free()
		se.conn.ReleaseChannel(pch)
		fail(negotiate.CodeQueueFull, "provider "+se.agent+" is not reading fast enough")
		return
	}
	srv.metrics.routingSeconds.Observe(time.Since(start).Seconds())
}

// hasExtension reports whether the M2M frame fr (in clear, header already
// read) has HAS_EXTENSIONS set: one byte test, so that frames without the
// block pay nothing more.
func hasExtension(fr []byte) bool {
	return frame.Flags(binary.LittleEndian.Uint32(fr[frame.OffFlags:])).HasExtensions()
}

// endedCtx is a context that has already ended: AcquireChannel with it
// returns an idle or new channel but never waits. One shared value, because
// a context per request is two allocations on the hot path.
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// takeReply hands a reply routed to the agent, a requester, to its queue.
func (se *session) takeReply(rep router.Reply[peer], provRS *router.Session[peer], deliveryID uint64, provCh transport.ChannelID, provider string, batch bool, fr []byte, format frameFormat, start time.Time) (negotiate.ErrorCode, string) {
	srv := se.srv
	end := rep.End
	if batch && !se.takesBatches() {
		return srv.refuseBatch(se, rep, provRS, deliveryID, provider)
	}
	flags := negotiate.FlagReply
	if end {
		flags |= negotiate.FlagEnd
	}
	if batch {
		flags |= negotiate.FlagBatch
	}
	// endRequest ends the requester's request with an error when it would
	// miss part of the answer, rather than let it wait for an END that
	// means nothing; later replies to the delivery are unknown and dropped.
	endRequest := func(code negotiate.ErrorCode, message string) {
		if !end {
			var err error
			if rep, err = srv.abort(provRS, deliveryID); err != nil {
				return
			}
		}
		se.endRequestWithError(transport.ChannelID(rep.Channel), rep.RequestID, code, message, provider)
	}
	if format == formatTokenNative && !se.takesTokenNative() {
		if end {
			se.sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, negotiate.CodeBadFrame, "provider replied with a TokenNative frame this session cannot take (protected without tn_sealed)", provider)
		}
		return negotiate.CodeBadFrame, "requester's session is protected without tn_sealed, so it cannot take a TokenNative frame"
	}
	if n, limit := se.outLen(fr, format), se.neg.Params.MaxPayload; n > limit {
		endRequest(negotiate.CodeTooLarge, "provider's reply exceeds this session's max_payload")
		return negotiate.CodeTooLarge, fmt.Sprintf("reply of %d bytes exceeds requester %s's max_payload %d", n, se.agent, limit)
	}
	m, _ := buildData(transport.ChannelID(rep.Channel), flags, rep.RequestID, provider, fr, format)
	if !se.enqueue(m) {
		m.free()
		if se.closing.Load() {
			// Not a slow reader: the requester is leaving (its CLOSE is
			// out or its teardown began), so say so.
			return negotiate.CodeRequesterGone, "the requester of this delivery is disconnecting"
		}
		endRequest(negotiate.CodeQueueFull, "a reply to this request was dropped: this session is not reading fast enough")
		return negotiate.CodeQueueFull, "requester " + se.agent + " is not reading fast enough"
	}
	srv.metrics.routingSeconds.Observe(time.Since(start).Seconds())
	return "", ""
}

// takesBatches reports whether this session may be sent, or send, batched
// stream chunks: it negotiated batch, with a max_payload any batch fits
// (docs/protocol.md §4.4).
func (se *session) takesBatches() bool {
	return se.neg.Params.Has(negotiate.FeatureBatch) && se.neg.Params.MaxPayload >= negotiate.MinBatchPayload
}

// outLen is the size fr (a plain M2M frame, or TokenNative) will have on
// this session's wire once the writer has protected (or sealed) it.
func (se *session) outLen(fr []byte, format frameFormat) int {
	if format != formatM2M {
		return len(fr) + negotiate.SealedTNOverhead(se.neg.Params.SecurityMode)
	}
	return len(fr) + se.send.Overhead()
}

// takesTokenNative reports whether a TokenNative frame can be sent to this
// session: as it is in mode none, sealed where tn_sealed was negotiated.
func (se *session) takesTokenNative() bool {
	return !se.send.Protected() || se.neg.Params.Has(negotiate.FeatureTNSealed)
}

// endRequestWithError sends the final error of an outstanding request whose
// answer was cut short. When the reason is this session's full queue the
// error is queued past the bound: dropped, the request would wait for an
// END forever. The excess is bounded by the session's outstanding requests
// (MaxOutstanding): the router has already forgotten this one.
func (se *session) endRequestWithError(ch transport.ChannelID, requestID uint64, code negotiate.ErrorCode, message, peer string) {
	if se.closing.Load() {
		se.sendError(ch, requestID, 0, code, message, peer)
		return
	}
	fr, err := frame.AppendErrorFrame(nil, string(code), message)
	if err != nil {
		return
	}
	m, ok := buildData(ch, negotiate.FlagReply|negotiate.FlagEnd, requestID, peer, fr, 0)
	if !ok {
		return
	}
	if !se.queue.push(m) {
		se.queue.pushLast(m)
	}
	se.kick()
}

// sendError queues an error frame (REPLY|END, plus flags) to this session.
func (se *session) sendError(ch transport.ChannelID, requestID uint64, flags negotiate.DataFlags, code negotiate.ErrorCode, message, peer string) {
	fr, err := frame.AppendErrorFrame(nil, string(code), message)
	if err != nil {
		se.log.Error().Err(err).Msg("building an error frame failed")
		return
	}
	m, ok := buildData(ch, negotiate.FlagReply|negotiate.FlagEnd|flags, requestID, peer, fr, 0)
	if !ok {
		return
	}
	if !se.enqueue(m) {
		m.free()
		se.srv.metrics.queueDrops.WithLabelValues("error_dropped").Inc()
	}
}

// buildData writes a DATA message with fr into a pooled buffer that has
// room for the tag the writer may append.
func buildData(ch transport.ChannelID, flags negotiate.DataFlags, requestID uint64, peer string, fr []byte, format frameFormat) (outMsg, bool) {
	return buildTracedData(ch, flags, requestID, peer, nil, fr, format)
}

// buildTracedData is buildData with a trace block in the header (nil:
// none).
func buildTracedData(ch transport.ChannelID, flags negotiate.DataFlags, requestID uint64, peer string, trace, fr []byte, format frameFormat) (outMsg, bool) {
	p := bufpool.Get(negotiate.MaxDataHeaderLen + len(trace) + len(fr) + tailroom)
	b, err := negotiate.AppendTracedDataHeader((*p)[:0], flags, requestID, peer, trace)
	if err != nil {
		bufpool.Put(p)
		return outMsg{}, false
	}
	off := len(b)
	b = append(b, fr...)
	*p = b
	return outMsg{ch: ch, buf: p, kind: msgData, format: format, frameOff: off}, true
}

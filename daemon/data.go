package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/router"
	"github.com/m2md/m2md/transport"
)

// handleData routes one DATA message: readData reads the DATA header and
// the frame's header (never the payload) and checks the frame against the
// session's security mode and sequence; a copy addressed to the receiver
// goes to the receiver's writer. Every refusal is answered to the sender.
func (se *session) handleData(msg transport.Message, start time.Time) {
	defer msg.Release()
	se.srv.routing.Add(1)
	defer se.srv.routing.Add(-1)
	var in dataIn
	ref := readData(&in, msg.Data, uint32(msg.Channel), se.recv, &se.neg.Params)
	if ref.protocol {
		se.protocolError(ref.message)
		return
	}
	if in.form != 0 {
		se.m.framesIn[in.format].Inc()
		se.m.bytesIn[in.format].Add(float64(len(msg.Data)))
	}
	if ref.code != "" {
		se.refuse(msg.Channel, &in.dh, ref.code, ref.message)
		return
	}
	if in.dh.IsReply() {
		se.forwardReply(msg.Channel, &in.dh, in.fr, in.format, in.h.ExtLen > 0, start)
		return
	}
	se.forwardRequest(msg.Channel, &in.dh, in.fr, in.format, &in.h, start)
}

func (se *session) forwardRequest(ch transport.ChannelID, dh *negotiate.DataHeader, fr []byte, format frameFormat, h *frame.Header, start time.Time) {
	srv := se.srv
	if srv.draining.Load() {
		se.refuse(ch, dh, negotiate.CodeShutdown, "daemon shutting down")
		return
	}
	req := router.Request{
		ID:               dh.RequestID,
		Channel:          uint64(ch),
		Peer:             dh.Peer,
		Model:            h.Model,
		HasRoutingHeader: format == formatM2M && (h.Schema == frame.SchemaRequest || h.Schema == frame.SchemaEmbeddingRequest),
	}
	ext := h.Ext // zero unless an M2M frame with the block (only from delta sessions)
	if ext.BaseID != 0 && len(dh.Peer) == 0 {
		// The conversation's provider: required for a delta, which only
		// the holder of its base can read; preferred for a full request.
		req.Prefer, _ = srv.affinity.lookup(se.neg.Org, se.agent, ext.BaseID)
		req.Require = ext.Delta
	}
	d, err := srv.router.RouteRequest(se.rs, req)
	if ext.BaseID != 0 && len(dh.Peer) == 0 {
		srv.countDeltaRoute(d.Affinity, err)
	}
	if err == nil && ext.DocID != 0 {
		// Only a provider that can take this document's deltas is worth
		// remembering. A proxy of another node's agent is remembered: that
		// node answers base_missing if its agent cannot (cluster.go).
		if prov := d.Provider.Value(); prov.delta || prov.remote != nil {
			srv.affinity.record(se.neg.Org, se.agent, ext.DocID, d.Provider.AgentID())
		}
	}
	if err != nil {
		var reason router.Reason
		if errors.As(err, &reason) && reason == router.ErrSessionClosed {
			srv.metrics.routingFailures.WithLabelValues(string(reason.Code())).Inc()
			return
		}
		srv.reqm.refused(h.Model)
		code := negotiate.CodeBadFrame
		if errors.As(err, &reason) {
			code = reason.Code()
		}
		srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
		var flags negotiate.DataFlags
		if code == negotiate.CodeDuplicateRequest {
			// Its request_id is that of a request still outstanding: as
			// a NOTICE it cannot be taken for that request's answer.
			flags = negotiate.FlagNotice
		}
		se.sendError(ch, dh.RequestID, flags, code, routeMessage(code, dh, h, &req, ext), busyPeer(code, dh, &req))
		return
	}
	var trace traced
	if len(dh.Trace) > 0 {
		trace = srv.traceDelivery(d, dh.Trace, h.Model, se.agent, start)
	}
	if d.Provider.Value().remote != nil {
		se.forwardRemote(fr, format, trace.block, d, start)
	} else {
		srv.deliverRequest(d, se.agent, se.takesBatches(), fr, format, trace, start)
	}
	if mayFailover(dh, &req, format) {
		// After the delivery: one that failed has ended, and keeps nothing.
		srv.keepForFailover(d, fr, format, h.Model, dh.Trace, start)
	}
}

// deliverRequest hands a routed request to its (local) provider, addressed
// from requester; on failure the requester gets the error. batch: the
// requester takes batched stream chunks (takesBatches). trace is its trace
// context, zero if none; a provider without feature trace gets the request
// without it.
func (srv *Server) deliverRequest(d router.Delivery[*session], requester string, batch bool, fr []byte, format frameFormat, trace traced, start time.Time) {
	prov := d.Provider.Value()
	fail := func(code negotiate.ErrorCode, message string) {
		srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
		if rep, err := srv.abort(d.Provider, d.ID); err == nil {
			rep.Requester.Value().sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, code, message, prov.agent)
		}
	}
	if format == formatTokenNative && !prov.takesTokenNative() {
		fail(negotiate.CodeBadFrame, "provider's session is protected without tn_sealed, so it cannot take a TokenNative frame")
		return
	}
	// A request with the extension block goes to a provider without
	// feature delta without it (docs/protocol.md §4.3); a delta cannot.
	strip := format == formatM2M && hasExtension(fr) && !prov.delta
	if n, limit := prov.outLen(fr, format), prov.neg.Params.MaxPayload; n > limit {
		// Sent anyway, it would break the provider's connection (its read
		// limit is max_payload + 512) or hand it more than it agreed to.
		fail(negotiate.CodeTooLarge, fmt.Sprintf("frame of %d bytes exceeds provider %s's max_payload %d", n, prov.agent, limit))
		return
	}
	// Take a free channel or open one, but never wait for one: a QUIC
	// provider's stream limit is how many deliveries it takes in flight, and
	// waiting here would stall this whole session's read loop (its other
	// requests, its replies, its PONGs) behind one busy provider. With an
	// ended context AcquireChannel still returns an idle or new channel and
	// fails only where it would have waited.
	pch, err := prov.conn.AcquireChannel(endedCtx)
	if err != nil {
		if errors.Is(err, context.Canceled) && prov.ctx.Err() == nil {
			fail(negotiate.CodeProviderBusy, "provider "+prov.agent+" has no free channel: as many requests in flight as it accepts streams")
		} else {
			fail(negotiate.CodeAgentGone, "no channel to provider "+prov.agent)
		}
		return
	}
	// Only a request that reaches its provider with the block may be
	// answered by a reply delta (docs/protocol.md §4.3).
	ext := format == formatM2M && prov.delta && hasExtension(fr)
	srv.router.SetProviderChannel(d.Provider, d.ID, uint64(pch), ext)
	var flags negotiate.DataFlags
	if batch && prov.takesBatches() {
		flags = negotiate.FlagBatch
	}
	if len(trace.block) > 0 && !prov.neg.Params.Has(negotiate.FeatureTrace) {
		trace.block = nil
	}
	m, ok := buildTracedData(pch, flags, d.ID, requester, trace.block, fr, format)
	if !ok {
		prov.conn.ReleaseChannel(pch)
		fail(negotiate.CodeBadFrame, "request cannot be addressed")
		return
	}
	if strip {
		// In the copy, which the writer protects afresh for the provider.
		b := *m.buf
		stripped, err := frame.StripExtension(b[m.frameOff:])
		if err != nil {
			m.free()
			prov.conn.ReleaseChannel(pch)
			if errors.Is(err, frame.ErrDelta) {
				srv.metrics.deltaRoutes[2].Inc()
				fail(negotiate.CodeBaseMissing, "provider "+prov.agent+" did not negotiate feature delta, so it cannot hold the base of this delta: resend the full document")
			} else {
				fail(negotiate.CodeBadFrame, "request's extension block cannot be removed for provider "+prov.agent)
			}
			return
		}
		*m.buf = b[:m.frameOff+len(stripped)]
	}
	if trace.span != nil {
		trace.span.queued = time.Now()
		m.span = trace.span
	}
	if !prov.enqueue(m) {
		m.free()
		prov.conn.ReleaseChannel(pch)
		fail(negotiate.CodeQueueFull, "provider "+prov.agent+" is not reading fast enough")
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

// countDeltaRoute counts a routed request that named a base.
func (srv *Server) countDeltaRoute(a router.Affinity, err error) {
	switch {
	case err == nil && a == router.AffinityKept:
		srv.metrics.deltaRoutes[0].Inc()
	case err == nil:
		srv.metrics.deltaRoutes[1].Inc()
	case errors.Is(err, router.ErrBaseMissing):
		srv.metrics.deltaRoutes[2].Inc()
	}
}

// endedCtx is a context that has already ended: AcquireChannel with it
// returns an idle or new channel but never waits. One shared value, because
// a context per request is two allocations on the hot path.
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// busyPeer is the peer of a refusal at routing: the one provider a request
// could go to when that provider is at its maximum (an addressed agent, or
// the holder of a delta's base), so that the requester knows which one is
// busy; empty for every other refusal, which reached no provider
// (docs/protocol.md §4, Errors).
func busyPeer(code negotiate.ErrorCode, dh *negotiate.DataHeader, req *router.Request) string {
	switch {
	case code != negotiate.CodeProviderBusy:
		return ""
	case len(dh.Peer) > 0:
		return string(dh.Peer)
	case req.Require:
		return req.Prefer
	}
	return ""
}

func routeMessage(code negotiate.ErrorCode, dh *negotiate.DataHeader, h *frame.Header, req *router.Request, ext frame.Extension) string {
	switch code {
	case negotiate.CodeNoRoute:
		return "no connected agent serves model " + string(h.Model)
	case negotiate.CodeUnknownAgent:
		return "agent " + string(dh.Peer) + " is not connected"
	case negotiate.CodeProviderBusy:
		if peer := busyPeer(code, dh, req); peer != "" {
			return "provider " + peer + " has its maximum of requests outstanding"
		}
		return "every provider of model " + string(h.Model) + " has its maximum of requests outstanding"
	case negotiate.CodeBaseMissing:
		return fmt.Sprintf("no connected provider of model %s holds base document %d of this delta (the provider that received it left or no longer serves the model, or this daemon has no record of it): resend the full document", h.Model, ext.BaseID)
	case negotiate.CodeTooManyRequests:
		return "too many requests outstanding on this session"
	case negotiate.CodeDuplicateRequest:
		return "a request with this id is still outstanding"
	}
	return "request has no address and no routing header"
}

// forwardReply routes a reply; replyDelta: its frame carries the block of a
// reply delta (readData has checked that it is a final schema-02 reply).
func (se *session) forwardReply(ch transport.ChannelID, dh *negotiate.DataHeader, fr []byte, format frameFormat, replyDelta bool, start time.Time) {
	srv := se.srv
	end := dh.IsEnd()
	rep, err := srv.router.RouteReply(se.rs, dh.RequestID, end)
	if end {
		se.conn.ReleaseChannel(ch)
	}
	if err == nil && replyDelta && !rep.Ext {
		// Its requester may not hold the dictionary: the request was
		// delivered without its block (docs/protocol.md §4.3). Refused as
		// refuseTelling refuses a malformed reply; the delivery ended with
		// this final reply.
		const message = "a reply delta answers a request delivered with its extension block (docs/protocol.md §4.3); this one was delivered without"
		srv.metrics.framesRefused.WithLabelValues(string(negotiate.CodeBadFrame)).Inc()
		se.tellRequesterRefused(rep, negotiate.CodeBadFrame, message)
		se.sendError(ch, dh.RequestID, negotiate.FlagNotice, negotiate.CodeBadFrame, message, "")
		return
	}
	if err != nil {
		code := negotiate.CodeUnknownRequest
		var reason router.Reason
		if errors.As(err, &reason) {
			code = reason.Code()
		}
		srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
		if reason == router.ErrRequesterGone {
			srv.requesterGone(&rep)
			se.sendError(ch, dh.RequestID, negotiate.FlagNotice, negotiate.CodeRequesterGone, "the requester of this delivery has disconnected", "")
		}
		return
	}
	if code, message := srv.deliverReply(rep, se.rs, dh.RequestID, ch, se.agent, dh.IsBatch(), fr, format, start); code != "" {
		srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
		se.sendError(ch, dh.RequestID, negotiate.FlagNotice, code, message, "")
	} else if replyDelta {
		srv.metrics.deltaReplies.Inc()
	}
}

// deliverReply hands a routed reply from provider (the router session the
// reply was routed from, with its delivery id and the channel the reply
// came on) to the requester. On failure
// it returns the code and message for the provider's NOTICE, having ended
// the requester's request with an error when the reply cannot reach it
// whole.
func (srv *Server) deliverReply(rep router.Reply[*session], provRS *router.Session[*session], deliveryID uint64, provCh transport.ChannelID, provider string, batch bool, fr []byte, format frameFormat, start time.Time) (negotiate.ErrorCode, string) {
	code, message := srv.passReply(rep, provRS, deliveryID, provCh, provider, batch, fr, format, start)
	if mark := srv.reqm.replied(&rep, string(code), fr, format, start); mark != rep.Mark {
		srv.router.Remark(provRS, deliveryID, mark)
	}
	return code, message
}

// passReply is deliverReply but for the per-model metrics.
func (srv *Server) passReply(rep router.Reply[*session], provRS *router.Session[*session], deliveryID uint64, provCh transport.ChannelID, provider string, batch bool, fr []byte, format frameFormat, start time.Time) (negotiate.ErrorCode, string) {
	req := rep.Requester.Value()
	end := rep.End
	if batch && (req.remote != nil || !req.takesBatches()) {
		// The delivery was not marked BATCH: the provider broke the rule.
		if _, err := srv.abort(provRS, deliveryID); err == nil {
			req.endRequestWithError(transport.ChannelID(rep.Channel), rep.RequestID, negotiate.CodeBadFrame, "provider sent a batch of stream chunks to a requester that does not take them", provider)
		}
		return negotiate.CodeBadFrame, "a batch of stream chunks to a delivery not marked BATCH"
	}
	if req.remote != nil {
		if err := req.replyRemote(rep.RequestID, rep.N, end, provider, format, fr, provRS.Value(), deliveryID, provCh); err != nil {
			if !end {
				_, _ = srv.abort(provRS, deliveryID) // later chunks are unknown and dropped
			}
			code, message := sendFailure(err, "the requester's node")
			if code != negotiate.CodeAgentGone {
				// The node is there: the error ends the request on it.
				req.sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, code, "provider's reply "+message, provider)
			}
			return code, message
		}
		srv.metrics.routingSeconds.Observe(time.Since(start).Seconds())
		return "", ""
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
		req.endRequestWithError(transport.ChannelID(rep.Channel), rep.RequestID, code, message, provider)
	}
	if format == formatTokenNative && !req.takesTokenNative() {
		if end {
			req.sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, negotiate.CodeBadFrame, "provider replied with a TokenNative frame this session cannot take (protected without tn_sealed)", provider)
		}
		return negotiate.CodeBadFrame, "requester's session is protected without tn_sealed, so it cannot take a TokenNative frame"
	}
	if n, limit := req.outLen(fr, format), req.neg.Params.MaxPayload; n > limit {
		endRequest(negotiate.CodeTooLarge, "provider's reply exceeds this session's max_payload")
		return negotiate.CodeTooLarge, fmt.Sprintf("reply of %d bytes exceeds requester %s's max_payload %d", n, req.agent, limit)
	}
	m, _ := buildData(transport.ChannelID(rep.Channel), flags, rep.RequestID, provider, fr, format)
	if !req.enqueue(m) {
		m.free()
		if req.closing.Load() {
			// Not a slow reader: the requester is leaving (its CLOSE is
			// out or its teardown began), so say so.
			return negotiate.CodeRequesterGone, "the requester of this delivery is disconnecting"
		}
		endRequest(negotiate.CodeQueueFull, "a reply to this request was dropped: this session is not reading fast enough")
		return negotiate.CodeQueueFull, "requester " + req.agent + " is not reading fast enough"
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

// refuse answers a frame the daemon will not route: an error reply for a
// request, a NOTICE for a reply.
func (se *session) refuse(ch transport.ChannelID, dh *negotiate.DataHeader, code negotiate.ErrorCode, message string) {
	se.refuseTelling(ch, dh, code, message, true)
}

// refuseTelling is refuse, with the error to the sender itself left out
// unless tell; everything else (counting, ending a refused reply's request
// for its requester) is the same.
func (se *session) refuseTelling(ch transport.ChannelID, dh *negotiate.DataHeader, code negotiate.ErrorCode, message string, tell bool) {
	se.srv.metrics.framesRefused.WithLabelValues(string(code)).Inc()
	se.log.Debug().Str("code", string(code)).Uint64("request_id", dh.RequestID).Msg("frame refused")
	var flags negotiate.DataFlags
	if dh.IsReply() {
		flags = negotiate.FlagNotice
		if dh.IsEnd() {
			se.conn.ReleaseChannel(ch)
		}
		// Final or not, the requester would miss part of the answer and
		// could wait for an END that will not come (the NOTICE tells the
		// provider to stop): end its request now with the same error.
		// Later replies to the delivery are unknown and dropped, and the
		// requester may reuse its request id at once.
		if rep, err := se.srv.abort(se.rs, dh.RequestID); err == nil {
			se.tellRequesterRefused(rep, code, message)
		}
	}
	if !tell {
		se.srv.metrics.queueDrops.WithLabelValues(dropErrorRateLimited).Inc()
		return
	}
	se.sendError(ch, dh.RequestID, flags, code, message, "")
}

// tellRequesterRefused ends rep's request, whose provider's reply this
// session refused, with the refusal's code: the requester would otherwise
// miss part of the answer or wait for an END that will not come.
func (se *session) tellRequesterRefused(rep router.Reply[*session], code negotiate.ErrorCode, message string) {
	rep.Requester.Value().sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, code, "provider's reply was refused: "+message, se.agent)
}

// endRequestWithError sends the final error of an outstanding request whose
// answer was cut short. When the reason is this session's full queue the
// error is queued past the bound: dropped, the request would wait for an
// END forever. The excess is bounded by the session's outstanding requests
// (MaxOutstanding): the router has already forgotten this one.
func (se *session) endRequestWithError(ch transport.ChannelID, requestID uint64, code negotiate.ErrorCode, message, peer string) {
	if se.remote != nil || se.closing.Load() {
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
	if se.remote != nil {
		// The requester proxy of another node: the error travels back to
		// the requester there. Notices are for local providers only.
		if flags&negotiate.FlagNotice == 0 && se.replyRemote(requestID, unnumbered, true, peerOrNode(peer, se), 0, fr, nil, 0, 0) != nil {
			se.srv.metrics.queueDrops.WithLabelValues("error_dropped").Inc()
		}
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

// peerOrNode names the sender of an error crossing the cluster: the agent
// it concerns, or the node itself.
func peerOrNode(peer string, se *session) string {
	if peer != "" {
		return peer
	}
	return se.srv.cluster.c.Node()
}

package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
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
		// remembering (peer.mayHoldBase).
		if d.Provider.Value().mayHoldBase() {
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
	if mayFailover(dh, &req, format) {
		// Before the delivery: once handed over, the provider may be lost
		// (its session torn down, its node's agent_gone arriving on the
		// cluster's goroutine) before this reader gets further, and a
		// request kept only then would end with agent_gone instead of
		// failing over. A delivery that fails in takeRequest is aborted,
		// which drops the copy.
		srv.keepForFailover(d, fr, format, h.Model, dh.Trace, start)
	}
	d.Provider.Value().takeRequest(d, se.origin(), fr, format, trace, start)
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
func (srv *Server) deliverReply(rep router.Reply[peer], provRS *router.Session[peer], deliveryID uint64, provCh transport.ChannelID, provider string, batch bool, fr []byte, format frameFormat, start time.Time) (negotiate.ErrorCode, string) {
	code, message := rep.Requester.Value().takeReply(rep, provRS, deliveryID, provCh, provider, batch, fr, format, start)
	if mark := srv.reqm.replied(&rep, string(code), fr, format, start); mark != rep.Mark {
		srv.router.Remark(provRS, deliveryID, mark)
	}
	return code, message
}

// refuseBatch refuses a batch of stream chunks to requester req, whose
// delivery was not marked BATCH: the provider broke the rule.
func (srv *Server) refuseBatch(req peer, rep router.Reply[peer], provRS *router.Session[peer], deliveryID uint64, provider string) (negotiate.ErrorCode, string) {
	if _, err := srv.abort(provRS, deliveryID); err == nil {
		req.endRequestWithError(transport.ChannelID(rep.Channel), rep.RequestID, negotiate.CodeBadFrame, "provider sent a batch of stream chunks to a requester that does not take them", provider)
	}
	return negotiate.CodeBadFrame, "a batch of stream chunks to a delivery not marked BATCH"
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
func (se *session) tellRequesterRefused(rep router.Reply[peer], code negotiate.ErrorCode, message string) {
	rep.Requester.Value().sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, code, "provider's reply was refused: "+message, se.agent)
}

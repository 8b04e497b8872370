package daemon

import (
	"fmt"
	"sync"
	"time"

	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// Failover (docs/protocol.md §4, "Failover"): a request routed by model
// whose provider is lost before any reply to it was routed is delivered
// once more, to another provider of the model; the requester sees only the
// latency. To deliver it again the daemon keeps a copy of the request's
// frame (in clear, as it arrived) beside the delivery, from routing until
// the first reply, the delivery's end or the provider's loss, whichever
// comes first (router.Keep). Config.FailoverBytes bounds what all copies
// hold together: a request that would pass it is delivered as usual but
// not kept, and fails with agent_gone like before if its provider is lost.

// Failover reasons, the label of m2md_failovers_total.
const (
	failoverDisconnected = "disconnected" // the connection ended without CLOSE (a killed agent)
	failoverClosed       = "closed"       // the agent closed or was replaced, drained, closed by the daemon
	failoverUnresponsive = "unresponsive" // it held requests and did not answer PING (liveness.go)
	failoverNodeGone     = "node_gone"    // the agent's cluster node left or is unreachable
)

var failoverReasons = []string{failoverDisconnected, failoverClosed, failoverUnresponsive, failoverNodeGone}

// keptRequest is a request's frame kept for failover (router.Kept).
type keptRequest struct {
	srv    *Server
	buf    *[]byte // the frame, from bufpool
	format frameFormat
	model  string
	start  time.Time
	// trace is the request's trace block as it arrived, empty if none: a
	// request delivered again is traced again.
	trace []byte
}

var keptPool = sync.Pool{New: func() any { return new(keptRequest) }}

// Drop gives the frame's memory back to the pool and to the budget.
func (k *keptRequest) Drop() {
	k.srv.keptBytes.Add(-int64(len(*k.buf)))
	bufpool.Put(k.buf)
	*k = keptRequest{trace: k.trace[:0]}
	keptPool.Put(k)
}

// mayFailover reports whether a request may be delivered again if its
// provider is lost: routed by model (an addressed request wants that agent
// alone; a delta only the holder of its base can read), an M2M frame that
// names its model, and not marked ONCE by its requester.
func mayFailover(dh *negotiate.DataHeader, req *router.Request, format frameFormat) bool {
	return len(dh.Peer) == 0 && !req.Require && !dh.IsOnce() && format == formatM2M && req.HasRoutingHeader
}

// keepForFailover keeps a copy of fr beside delivery d, within the
// budget. A delivery that has already ended or been answered keeps
// nothing (router.Keep).
func (srv *Server) keepForFailover(d router.Delivery[peer], fr []byte, format frameFormat, model, trace []byte, start time.Time) {
	if srv.cfg.FailoverBytes < 0 {
		return
	}
	n := int64(len(fr))
	if srv.keptBytes.Add(n) > int64(srv.cfg.FailoverBytes) {
		srv.keptBytes.Add(-n)
		srv.metrics.failoverNotKept.Inc()
		return
	}
	k := keptPool.Get().(*keptRequest)
	k.srv, k.format, k.model, k.start = srv, format, string(model), start
	k.buf = bufpool.Get(len(fr))
	copy(*k.buf, fr)
	k.trace = append(k.trace, trace...)
	if !srv.router.Keep(d.Provider, d.ID, k) {
		k.Drop()
	}
}

// failOver delivers an orphaned request once more, to another provider of
// its model, if it was kept (no reply had been routed, the requester
// allowed it) and its requester is still here. It reports whether the
// request was routed again; if not, the caller ends it with agent_gone.
// The kept frame is dropped either way. A request failed over is not kept
// again: it is delivered at most twice.
func (srv *Server) failOver(o router.Orphan[peer], from, reason string) bool {
	k, _ := o.Kept.(*keptRequest)
	if k == nil {
		return false
	}
	defer k.Drop()
	// A request from another node fails over there, when its node learns
	// that the provider is gone.
	rq, local := o.Requester.Value().(*session)
	if !local || rq.closing.Load() || srv.draining.Load() {
		return false
	}
	d, err := srv.router.RouteRequest(o.Requester, router.Request{
		ID: o.RequestID, Channel: o.Channel, Model: []byte(k.model), HasRoutingHeader: true,
	})
	if err != nil {
		return false // no other provider (or none free): agent_gone, as without failover
	}
	srv.metrics.failovers.WithLabelValues(reason).Inc()
	rq.log.Debug().Str("from", from).Str("to", d.Provider.AgentID()).Str("reason", reason).
		Uint64("request_id", o.RequestID).Msg("request failed over")
	fr := *k.buf
	var trace traced
	if len(k.trace) > 0 {
		trace = srv.traceDelivery(d, k.trace, []byte(k.model), rq.agent, k.start)
	}
	d.Provider.Value().takeRequest(d, rq.origin(), fr, k.format, trace, k.start)
	return true
}

// endOrphans fails over, or ends with agent_gone, the requests a provider
// (agent, on this node or another) held when it was lost. gone says how it
// went, for the error's message.
func (srv *Server) endOrphans(orphans []router.Orphan[peer], agent, reason, gone string) {
	for _, o := range orphans {
		if srv.failOver(o, agent, reason) {
			continue
		}
		srv.metrics.routingFailures.WithLabelValues(string(negotiate.CodeAgentGone)).Inc()
		srv.reqm.ended(o.Mark, outcomeFailed)
		message := "provider " + agent + " " + gone + " before its final reply"
		if o.Replies > 0 {
			message = fmt.Sprintf("provider %s %s after %d of its replies had been delivered: the answer is incomplete", agent, gone, o.Replies)
		}
		o.Requester.Value().sendError(transport.ChannelID(o.Channel), o.RequestID, 0, negotiate.CodeAgentGone, message, agent)
	}
}

// failoverReason is the failover reason of a departed local session.
func (se *session) failoverReason() string {
	if r, ok := se.lostReason.Load().(string); ok {
		return r
	}
	if reason, _ := se.closeReason.Load().(negotiate.CloseReason); reason != "" {
		return failoverClosed
	}
	return failoverDisconnected
}

package daemon

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// What the other nodes send this one (the cluster.Handler's messages other
// than membership): requests for its agents, replies to its agents'
// requests, and the news of what was lost or refused on the way.

// Request delivers a request another node forwarded to one of this node's
// agents, as forwardRequest does for a local requester.
func (cs *clusterMember) Request(r *cluster.Request) {
	srv := cs.srv
	start := time.Now()
	// Answered without state: neither a shed request nor one from a node
	// that is not a member gets a nodeRequester; the answer still
	// reaches its requester, which would wait otherwise.
	switch {
	case r.Shed:
		if cs.shedFrame == nil {
			cs.shedFrame, _ = frame.AppendErrorFrame(nil, string(negotiate.CodeQueueFull), shedMessage(cs.c.Node()))
		}
		cs.refuse(r, negotiate.CodeQueueFull, cs.shedFrame)
		return
	case r.Stranger:
		fr, _ := frame.AppendErrorFrame(nil, string(negotiate.CodeAgentGone), "node "+cs.c.Node()+" does not count node "+r.From+" as a cluster member (no heartbeat from it for a second): try again")
		cs.refuse(r, negotiate.CodeAgentGone, fr)
		return
	}
	if !cs.announced(r.From, r.Org, r.Requester) {
		// A node speaks for the agents it announced (each with its org's
		// proof), not for any org under any name.
		cs.c.Stats().Dropped[cluster.DropForbidden].Add(1)
		fr, _ := frame.AppendErrorFrame(nil, string(negotiate.CodeUnknownAgent), "node "+r.From+" has not announced agent "+r.Requester+" to node "+cs.c.Node()+": it cannot send requests as it")
		cs.refuse(r, negotiate.CodeUnknownAgent, fr)
		return
	}
	rq := cs.node(r.From).requester(srv, r.Org)
	if rq == nil {
		return // the node was declared dead: its requests are void
	}
	fail := func(code negotiate.ErrorCode, message string) {
		srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
		rq.sendError(0, r.W, 0, code, message, r.Target)
	}
	if srv.draining.Load() {
		fail(negotiate.CodeShutdown, "daemon shutting down")
		return
	}
	var h frame.Header
	if r.Algo == 0 {
		// The sending node verified the frame; its header must still be
		// readable before anything is handed to a provider.
		if err := frame.ReadHeader(r.Frame, &h); err != nil {
			fail(negotiate.CodeBadFrame, "frame header unreadable")
			return
		}
	}
	d, err := srv.router.RouteRequest(rq.rs, router.Request{ID: r.W, Peer: []byte(r.Target)})
	if err != nil {
		code := negotiate.CodeBadFrame
		if reason, ok := err.(router.Reason); ok {
			code = reason.Code()
		}
		fail(code, "agent "+r.Target+" is not connected to node "+cs.c.Node())
		return
	}
	prov, local := d.Provider.Value().(*session)
	if !local {
		// It moved to a third node since the sender looked: one hop only,
		// so that two nodes that disagree cannot bounce a request.
		if rep, err := srv.abort(d.Provider, d.ID); err == nil {
			rep.Requester.Value().sendError(0, rep.RequestID, 0, negotiate.CodeAgentGone, "agent "+r.Target+" moved to another node", r.Target)
		}
		return
	}
	var trace traced
	if len(r.Trace) > 0 {
		trace = srv.traceDelivery(d, r.Trace, h.Model, r.Requester, start)
	}
	prov.takeRequest(d, origin{org: r.Org, agent: r.Requester}, r.Frame, frameFormat(r.Algo), trace, start)
}

// refuse answers request r with the error frame fr (of code) without
// routing it.
func (cs *clusterMember) refuse(r *cluster.Request, code negotiate.ErrorCode, fr []byte) {
	cs.srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
	if len(fr) == 0 || cs.c.SendReply(r.From, &cluster.Reply{W: r.W, N: cluster.Unnumbered, End: true, Provider: r.Target, Frame: fr}) != nil {
		cs.srv.metrics.queueDrops.WithLabelValues("error_dropped").Inc()
	}
}

// shedMessage is the error of a request or reply node shed (cluster.Request.Shed).
func shedMessage(node string) string {
	return "node " + node + " is overloaded: its cluster inbox is full"
}

// Reply hands a reply from another node to the local requester. A reply
// that cannot be delivered (shed, or refused as deliverReply refuses a
// local provider's) ends the requester's request with the error, and the
// provider's node is told so that the provider gets its NOTICE.
func (cs *clusterMember) Reply(r *cluster.Reply) {
	srv := cs.srv
	cs.mu.Lock()
	n := cs.nodes[r.From]
	cs.mu.Unlock()
	if n == nil {
		return
	}
	n.mu.Lock()
	p, ok := n.pending[r.W]
	// A reply out of its place: one before it was lost on the way (NATS
	// dropped it; its sender is told and answers it, seq.go). Delivering
	// this one would leave a hole in the answer the requester cannot see,
	// and if it is the final one, end the request as if whole.
	hole := ok && r.N != cluster.Unnumbered && r.N != p.next
	switch {
	case !ok:
	case r.End || hole:
		delete(n.pending, r.W)
	default:
		p.next++
		n.pending[r.W] = p
	}
	n.mu.Unlock()
	if !ok {
		srv.metrics.routingFailures.WithLabelValues(string(negotiate.CodeUnknownRequest)).Inc()
		return
	}
	if r.End && p.next == 0 && lostBeforeReply(r) {
		// The provider's node says it lost the provider before it replied,
		// and this news has overtaken the provider's departure (AgentDown):
		// the request fails over now, as it would then.
		if o, ok := srv.router.Lose(p.proxy.rs, p.delivery); ok {
			srv.endOrphans([]router.Orphan[peer]{o}, r.Provider, failoverNodeGone,
				"is gone (its node "+r.From+" lost it)")
			return
		}
	}
	var code negotiate.ErrorCode
	var message string
	if r.Shed || hole {
		code, message = negotiate.CodeQueueFull, shedMessage(cs.c.Node())
		if hole {
			message = "node " + cs.c.Node() + " fell behind: a reply before this one was lost between cluster nodes"
		}
		rep, err := srv.abort(p.proxy.rs, p.delivery)
		if err == nil {
			rep.Requester.Value().endRequestWithError(transport.ChannelID(rep.Channel), rep.RequestID, code, "a reply to this request was dropped: "+message, r.Provider)
		}
	} else {
		rep, err := srv.router.RouteReply(p.proxy.rs, p.delivery, r.End)
		if errors.Is(err, router.ErrRequesterGone) {
			srv.requesterGone(&rep)
		}
		if err != nil {
			if reason, ok := err.(router.Reason); ok {
				srv.metrics.routingFailures.WithLabelValues(string(reason.Code())).Inc()
			}
			return
		}
		code, message = srv.deliverReply(rep, p.proxy.rs, p.delivery, 0, r.Provider, false, r.Frame, frameFormat(r.Algo), time.Now())
	}
	if code == "" {
		return
	}
	srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
	if !r.End {
		// The request has ended here: later replies are unknown.
		n.mu.Lock()
		delete(n.pending, r.W)
		n.mu.Unlock()
	}
	_ = cs.c.SendNotice(r.From, &cluster.Notice{W: r.W, About: r.Seq, Code: string(code), Message: message})
}

// Lost answers a request or reply this node sent that NATS dropped on the
// way (cluster.Lost): as if its node had refused it on arrival, with
// queue_full.
func (cs *clusterMember) Lost(l *cluster.Lost) {
	srv := cs.srv
	cs.mu.Lock()
	n := cs.nodes[l.Node]
	cs.mu.Unlock()
	const code = negotiate.CodeQueueFull
	message := "lost between cluster nodes: node " + l.Node + " fell behind (its cluster inbox overflowed)"
	switch l.Kind {
	case cluster.LostRequest:
		if n == nil {
			return // the node was declared dead: its requests were ended then
		}
		n.mu.Lock()
		p, ok := n.pending[l.W]
		delete(n.pending, l.W)
		n.mu.Unlock()
		if ok {
			cs.endPending(p, code, "request "+message)
		}
	case cluster.LostReply:
		srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
		// A lost chunk's delivery that is over here has been told
		// already: the requester's node saw the hole at the next reply
		// and sent a notice about it (Reply). Only a lost final reply
		// has nobody else to tell its provider.
		ref := l.Ref
		if !l.End {
			ref = nil
		}
		cs.noticeProvider(l.Node, l.W, ref, l.Delivery, l.Channel, code, "reply "+message)
		if cs.lostFrame == nil {
			cs.lostFrame, _ = frame.AppendErrorFrame(nil, string(code), "a reply to this request was lost between cluster nodes: the requester's node fell behind (its cluster inbox overflowed)")
		}
		// In its place, an error that ends the request (unknown there if
		// its final reply got through after the lost one).
		provider := cs.c.Node()
		if ses := refSession(l.Ref); ses != nil {
			provider = ses.agent
		}
		if cs.c.SendReply(l.Node, &cluster.Reply{W: l.W, N: cluster.Unnumbered, End: true, Provider: provider, Frame: cs.lostFrame}) != nil {
			srv.metrics.queueDrops.WithLabelValues("error_dropped").Inc()
		}
	case cluster.LostAll, cluster.LostVoid:
		if n == nil {
			return
		}
		n.mu.Lock()
		pending := n.pending
		n.pending = make(map[uint64]pendingRequest)
		n.mu.Unlock()
		for w, p := range pending {
			if l.Kind == cluster.LostVoid {
				// That node dropped them already: nothing to cancel.
				cs.endPending(p, negotiate.CodeAgentGone, "node "+l.Node+" stopped hearing node "+cs.c.Node()+" and dropped the requests it was serving for it: try again")
				continue
			}
			cs.endPending(p, code, "request "+message+"; messages between the nodes were lost beyond naming")
			_ = cs.c.SendCancel(l.Node, w) // its provider, if it got it, stops
		}
	}
}

// endPending ends a request this node sent to another for its requester.
func (cs *clusterMember) endPending(p pendingRequest, code negotiate.ErrorCode, message string) {
	cs.srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
	if rep, err := cs.srv.abort(p.proxy.rs, p.delivery); err == nil {
		rep.Requester.Value().endRequestWithError(transport.ChannelID(rep.Channel), rep.RequestID, code, message, p.proxy.agent)
	}
}

// noticeProvider gives the local provider of node's request w its NOTICE:
// through the open delivery, which it frees (later replies are dropped),
// or, once the delivery is over (its final reply sent), through what this
// node noted when it sent the reply (ref, the provider's session).
func (cs *clusterMember) noticeProvider(node string, w uint64, ref any, delivery, ch uint64, code negotiate.ErrorCode, message string) {
	for _, r := range cs.requestersOf(node) {
		if cn, err := cs.srv.router.Cancel(r.rs, w, 0); err == nil {
			cn.Provider.Value().sendError(transport.ChannelID(cn.ProviderChannel), cn.DeliveryID, negotiate.FlagNotice, code, message, "")
			return
		}
	}
	if ses := refSession(ref); ses != nil {
		ses.sendError(transport.ChannelID(ch), delivery, negotiate.FlagNotice, code, message, "")
	}
}

// Notice gives a local provider the NOTICE for a reply the requester's
// node could not deliver, and frees its delivery if still open (its later
// replies are dropped), as forwardReply does for a local requester. A
// delivery that is over here (its final reply was the one refused, or the
// provider finished before the refusal came back) is found through what
// this node noted when it sent the reply (cluster.Notice.Ref).
func (cs *clusterMember) Notice(nt *cluster.Notice) {
	cs.noticeProvider(nt.From, nt.W, nt.Ref, nt.Delivery, nt.Channel, negotiate.ErrorCode(nt.Code), nt.Message)
}

// Cancel acts on a CANCEL from another node: the request it forwarded (w)
// is freed here, and its provider gets CANCEL as from a local requester.
func (cs *clusterMember) Cancel(c *cluster.Cancel) {
	for _, r := range cs.requestersOf(c.From) { // one per org; w is unique across them
		if cn, err := cs.srv.router.Cancel(r.rs, c.W, 0); err == nil {
			cn.Provider.Value().takeCancel(cn.DeliveryID, cn.ProviderChannel)
			return
		}
	}
	cs.srv.metrics.cancels.WithLabelValues("not_outstanding").Inc()
}

// lostBeforeReply reports whether r is the agent_gone a provider's node
// answers a request from this node with when it loses the provider before
// the provider replied (endOrphans there): an error frame of its own
// making, with code agent_gone.
func lostBeforeReply(r *cluster.Reply) bool {
	if r.N != cluster.Unnumbered || r.Algo != 0 {
		return false
	}
	var h frame.Header
	if frame.ReadHeader(r.Frame, &h) != nil || h.Schema != frame.SchemaError {
		return false
	}
	body, err := frame.AppendDecode(nil, r.Frame, frame.Limits{})
	if err != nil {
		return false
	}
	var doc struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &doc) == nil && doc.Error.Code == string(negotiate.CodeAgentGone)
}

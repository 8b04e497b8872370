package daemon

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// The peers that stand in this node's router for another node's side
// (peer): what is routed to them has no connection here to go to, so it
// crosses to their node. A request routed to a proxy is published to its
// node with a fresh id w from this node (pending maps w back to the proxy
// and the router's delivery id); that node delivers it from its
// nodeRequester for this node, and the provider's replies travel back by
// the same ids.

// unnumbered is the place among its request's replies of an error this
// node makes itself (cluster.Unnumbered).
const unnumbered = cluster.Unnumbered

// remoteNode is another node of the cluster, as this node sees it.
type remoteNode struct {
	name  string
	nextW atomic.Uint64
	mu    sync.Mutex
	// requesters stand, one per org, for the node's agents when they ask
	// this node's providers.
	requesters map[string]*nodeRequester
	pending    map[uint64]pendingRequest
	gone       bool
}

// pendingRequest is a request this node sent to the remote node.
type pendingRequest struct {
	proxy    *remoteEnd // the agentProxy it was routed to
	delivery uint64
	next     uint32 // the place of the reply expected next (cluster.Reply.N)
}

// remoteEnd is what both stand-ins share: the node their agent or
// requester is on, and how what the router hands them crosses to it. The
// router gives each only what its role takes (a proxy makes no requests; a
// requester is registered with router.Attach, so nothing but replies is
// routed to it), but either crosses to its node whatever it is given.
type remoteEnd struct {
	srv   *Server
	agent string
	node  *remoteNode
	rs    *router.Session[peer]
	// marks are its per-model series as a provider (reqmetrics.go).
	marks atomic.Pointer[providerMarks]
}

// agentProxy is an agent connected to another node, registered in this
// node's router under its agent id and models, so that routing sees local
// and remote providers alike and the router's orphan handling ends the
// requests to one that goes away.
type agentProxy struct{ remoteEnd }

// nodeRequester stands for another node's agents of one org when they ask
// this node's providers.
type nodeRequester struct{ remoteEnd }

func (re *remoteEnd) name() string                              { return re.agent }
func (re *remoteEnd) homeNode() string                          { return re.node.name }
func (re *remoteEnd) marksSlot() *atomic.Pointer[providerMarks] { return &re.marks }

// mayHoldBase: the agent's node answers base_missing if its agent cannot
// take the delta.
func (re *remoteEnd) mayHoldBase() bool { return true }

// requester returns the peer standing for the node's agents of org,
// created on the node's first request in that org; nil once the node is
// gone.
func (n *remoteNode) requester(srv *Server, org string) *nodeRequester {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gone {
		return nil
	}
	r := n.requesters[org]
	if r == nil {
		org = strings.Clone(org) // it may alias a cluster message
		r = &nodeRequester{remoteEnd{srv: srv, agent: "node-" + n.name, node: n}}
		// The node bounds each of its requesters; this bounds the table of
		// everything it forwards at once.
		r.rs = srv.router.Attach(org, r.agent, r, 64*srv.cfg.MaxOutstanding)
		n.requesters[org] = r
	}
	return r
}

// takeRequest sends a request routed to a remote agent's proxy to the
// agent's node.
func (re *remoteEnd) takeRequest(d router.Delivery[peer], from origin, fr []byte, format frameFormat, trace traced, start time.Time) {
	srv := re.srv
	n := re.node
	w := n.nextW.Add(1)
	n.mu.Lock()
	n.pending[w] = pendingRequest{proxy: re, delivery: d.ID}
	n.mu.Unlock()
	err := srv.cluster.c.SendRequest(n.name, &cluster.Request{W: w, Org: from.org, Requester: from.agent, Target: re.agent, Algo: int8(format), Frame: fr, Trace: trace.block})
	if err != nil {
		n.mu.Lock()
		delete(n.pending, w)
		n.mu.Unlock()
		code, message := sendFailure(err, "provider "+re.agent+"'s node")
		srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
		if rep, err := srv.abort(d.Provider, d.ID); err == nil {
			rep.Requester.Value().sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, code, message, re.agent)
		}
		return
	}
	srv.metrics.routingSeconds.Observe(time.Since(start).Seconds())
}

// takeCancel carries a requester's CANCEL to the node of the provider
// whose proxy got the (already freed) delivery.
func (re *remoteEnd) takeCancel(deliveryID, _ uint64) {
	srv, n := re.srv, re.node
	var w uint64
	n.mu.Lock()
	for k, p := range n.pending { // rare: a scan beats a second map on every request
		if p.proxy == re && p.delivery == deliveryID {
			w = k
			delete(n.pending, k)
			break
		}
	}
	n.mu.Unlock()
	if w == 0 || srv.cluster.c.SendCancel(n.name, w) != nil {
		srv.metrics.cancels.WithLabelValues("remote_lost").Inc()
		return
	}
	srv.metrics.cancels.WithLabelValues("forwarded_remote").Inc()
}

// takeReply publishes a local provider's reply to the requester's node.
// The delivery was not marked BATCH (the node takes no batches).
func (re *remoteEnd) takeReply(rep router.Reply[peer], provRS *router.Session[peer], deliveryID uint64, provCh transport.ChannelID, provider string, batch bool, fr []byte, format frameFormat, start time.Time) (negotiate.ErrorCode, string) {
	srv := re.srv
	if batch {
		return srv.refuseBatch(re, rep, provRS, deliveryID, provider)
	}
	from, _ := provRS.Value().(*session)
	if err := re.replyRemote(rep.RequestID, rep.N, rep.End, provider, format, fr, from, deliveryID, provCh); err != nil {
		if !rep.End {
			_, _ = srv.abort(provRS, deliveryID) // later chunks are unknown and dropped
		}
		code, message := sendFailure(err, "the requester's node")
		if code != negotiate.CodeAgentGone {
			// The node is there: the error ends the request on it.
			re.sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, code, "provider's reply "+message, provider)
		}
		return code, message
	}
	srv.metrics.routingSeconds.Observe(time.Since(start).Seconds())
	return "", ""
}

// sendError publishes the error to the requester's node, which ends the
// request there. Notices are for local providers only.
func (re *remoteEnd) sendError(_ transport.ChannelID, requestID uint64, flags negotiate.DataFlags, code negotiate.ErrorCode, message, peer string) {
	fr, err := frame.AppendErrorFrame(nil, string(code), message)
	if err != nil {
		re.srv.log.Error().Err(err).Msg("building an error frame failed")
		return
	}
	if flags&negotiate.FlagNotice == 0 && re.replyRemote(requestID, unnumbered, true, re.peerOrNode(peer), 0, fr, nil, 0, 0) != nil {
		re.srv.metrics.queueDrops.WithLabelValues("error_dropped").Inc()
	}
}

// endRequestWithError is sendError: no queue here can refuse the error.
func (re *remoteEnd) endRequestWithError(ch transport.ChannelID, requestID uint64, code negotiate.ErrorCode, message, peer string) {
	re.sendError(ch, requestID, 0, code, message, peer)
}

// replyRemote publishes a reply (or error) to the node re stands for, n
// its place among the request's replies (router.Reply.N, or
// cluster.Unnumbered for the daemon's own error). from is the provider's
// session (nil for the daemon's own error), with the delivery id and
// channel it replied on: the one to tell if the reply is lost or refused
// there.
func (re *remoteEnd) replyRemote(requestID uint64, n uint32, end bool, provider string, format frameFormat, fr []byte, from *session, delivery uint64, ch transport.ChannelID) error {
	r := cluster.Reply{W: requestID, N: n, End: end, Provider: provider, Algo: int8(format), Frame: fr}
	if from != nil {
		r.Ref, r.Delivery, r.Channel = from.ref(), delivery, uint64(ch)
	}
	return re.srv.cluster.c.SendReply(re.node.name, &r)
}

// peerOrNode names the sender of an error crossing the cluster: the agent
// it concerns, or the node itself.
func (re *remoteEnd) peerOrNode(peer string) string {
	if peer != "" {
		return peer
	}
	return re.srv.cluster.c.Node()
}

// sendFailure is the error code and message for a message to node (named
// for the user: "provider p's node") the cluster could not send.
func sendFailure(err error, node string) (negotiate.ErrorCode, string) {
	if errors.Is(err, cluster.ErrTooLarge) {
		return negotiate.CodeTooLarge, "too large to cross to " + node + " (" + err.Error() + "): raise max_payload in the NATS deployment (--nats-url) to 16MiB"
	}
	return negotiate.CodeAgentGone, node + " is unreachable"
}

// ref is what the cluster's ring of sent messages keeps of se
// (cluster.Reply.Ref): a weak pointer, so that the ring (65,536 entries
// per other node) never keeps a session that has ended alive, with its
// connection's buffers. Made once per session; storing it in an
// interface does not allocate.
func (se *session) ref() any {
	if p := se.weakSelf.Load(); p != nil {
		return *p
	}
	w := weak.Make(se)
	se.weakSelf.CompareAndSwap(nil, &w)
	return w
}

// refSession is the session behind a ref, nil if it has been collected.
func refSession(ref any) *session {
	if w, ok := ref.(weak.Pointer[session]); ok {
		return w.Value()
	}
	return nil
}

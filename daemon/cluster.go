package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/router"
	"github.com/m2md/m2md/security"
	"github.com/m2md/m2md/transport"
)

// The daemon's side of a cluster (docs/operations.md, "Cluster"). Agents on
// other nodes are registered in this node's router as proxy sessions
// (session.remote set, no connection), so routing by agent id and by model
// - least outstanding first - sees local and remote providers alike, and
// the router's orphan handling ends requests to a proxy that goes away with
// agent_gone. A request routed to a proxy is published to its node with a
// fresh id w from this node (pending maps w back to the proxy and the
// router's delivery id); the node delivers it from a requester proxy that
// stands for this node (router.Attach), and the provider's replies travel
// back by the same ids. Without a cluster none of this exists: the hot path
// pays one nil check on the provider and on the requester.

// unnumbered is the place among its request's replies of an error this
// node makes itself (cluster.Unnumbered).
const unnumbered = cluster.Unnumbered

// remoteNode is another node of the cluster, as this node sees it.
type remoteNode struct {
	name  string
	nextW atomic.Uint64
	mu    sync.Mutex
	// requesters stand, one per org, for the node's agents when they ask
	// this node's providers: replies and errors given to them are
	// published back.
	requesters map[string]*session
	pending    map[uint64]pendingRequest
	gone       bool
}

// pendingRequest is a request this node sent to the remote node.
type pendingRequest struct {
	proxy    *session
	delivery uint64
	next     uint32 // the place of the reply expected next (cluster.Reply.N)
}

// clusterState is the daemon's cluster bookkeeping; it is the
// cluster.Handler.
type clusterState struct {
	srv *Server
	c   *cluster.Cluster

	mu      sync.Mutex
	newest  map[identity]cluster.Agent // newest registration known anywhere
	proxies map[string]*session        // node/session -> proxy of a remote agent
	nodes   map[string]*remoteNode

	// shedFrame is the error frame of every shed request, built once
	// (dispatcher only): an overloaded node must answer what it sheds for
	// less than delivering it would cost, never Brotli each answer.
	// lostFrame, the same for a reply NATS lost (Lost).
	shedFrame, lostFrame []byte
}

func newClusterState(s *Server) *clusterState {
	return &clusterState{
		srv:     s,
		newest:  make(map[identity]cluster.Agent),
		proxies: make(map[string]*session),
		nodes:   make(map[string]*remoteNode),
	}
}

func proxyKey(node, session string) string { return node + "/" + session }

// identity is an agent's identity across the cluster, as in the router.
type identity struct{ org, id string }

// node returns the remote node's state, created on first contact.
func (cs *clusterState) node(name string) *remoteNode {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.nodeLocked(name)
}

func (cs *clusterState) nodeLocked(name string) *remoteNode {
	n := cs.nodes[name]
	if n == nil {
		name = strings.Clone(name) // it may alias a cluster message
		n = &remoteNode{name: name, pending: make(map[uint64]pendingRequest), requesters: make(map[string]*session)}
		cs.nodes[name] = n
	}
	return n
}

// requester returns the session standing for the node's agents of org,
// created on the node's first request in that org; nil once the node is
// gone.
func (n *remoteNode) requester(srv *Server, org string) *session {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gone {
		return nil
	}
	r := n.requesters[org]
	if r == nil {
		org = strings.Clone(org) // it may alias a cluster message
		r = &session{srv: srv, agent: "node-" + n.name, remote: n, log: srv.log}
		// The node bounds each of its requesters; this bounds the table of
		// everything it forwards at once.
		r.rs = srv.router.Attach(org, r.agent, r, 64*srv.cfg.MaxOutstanding)
		n.requesters[org] = r
	}
	return r
}

// register adds a local session to the router under the cluster's rule:
// its registration is stamped newer than any this node has seen for the
// agent id, so it replaces every older one, here and on every node that
// receives the announcement. mayReplace is the daemon's duplicate-session
// policy for a holder on this node (Router.RegisterIf).
func (cs *clusterState) register(se *session, models []string, mayReplace func(*router.Session[*session]) bool) (rs, replaced *router.Session[*session], err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	key := identity{se.neg.Org, se.agent}
	stamp := time.Now().UnixNano()
	if prev, ok := cs.newest[key]; ok && prev.Stamp >= stamp {
		stamp = prev.Stamp + 1
	}
	if rs, replaced, err = cs.srv.router.RegisterIf(se.neg.Org, se.agent, models, se, mayReplace); err != nil {
		return nil, nil, err
	}
	a := cluster.Agent{Org: se.neg.Org, ID: se.agent, Session: se.neg.ID, Node: cs.c.Node(), Models: models, Stamp: stamp}
	cs.newest[key] = a
	cs.c.Announce(a)
	return rs, replaced, nil
}

// unregister withdraws a local session that has ended.
func (cs *clusterState) unregister(se *session) {
	cs.mu.Lock()
	key := identity{se.neg.Org, se.agent}
	if a, ok := cs.newest[key]; ok && a.Node == cs.c.Node() && a.Session == se.neg.ID {
		delete(cs.newest, key)
	}
	cs.mu.Unlock()
	cs.c.Withdraw(cluster.Agent{Org: se.neg.Org, ID: se.agent, Session: se.neg.ID})
}

// AgentUp registers a proxy for a remote agent unless this node knows a
// newer registration of its id. A local session it replaces is closed with
// REPLACED; a proxy it replaces keeps answering its deliveries until its
// node reports it gone.
func (cs *clusterState) AgentUp(a cluster.Agent) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	pkey := proxyKey(a.Node, a.Session)
	if _, dup := cs.proxies[pkey]; dup {
		return
	}
	key := identity{a.Org, a.ID}
	if prev, ok := cs.newest[key]; ok && !a.Newer(&prev) {
		return // older: the newer one's announcement will close it at its node
	}
	n := cs.nodeLocked(a.Node)
	proxy := &session{srv: cs.srv, agent: a.ID, remote: n, log: cs.srv.log}
	rs, replaced, err := cs.srv.router.Register(a.Org, a.ID, a.Models, proxy)
	if err != nil {
		cs.srv.log.Warn().Err(err).Str("node", a.Node).Msg("remote agent not registered")
		return
	}
	proxy.rs = rs
	cs.srv.reqm.marksOf(proxy, rs)
	cs.proxies[pkey] = proxy
	cs.newest[key] = a
	if replaced != nil {
		if old := replaced.Value(); old.remote == nil {
			old.log.Info().Str("by_node", a.Node).Msg("session replaced by a newer one on another node")
			old.initiateClose(negotiate.ReasonReplaced, "a newer session claimed agent id "+a.ID+" on another node")
		}
	}
}

// AgentDown removes a remote agent's proxy; the requests in flight to it
// end with agent_gone.
func (cs *clusterState) AgentDown(a cluster.Agent) {
	cs.mu.Lock()
	pkey := proxyKey(a.Node, a.Session)
	proxy := cs.proxies[pkey]
	delete(cs.proxies, pkey)
	key := identity{a.Org, a.ID}
	if cur, ok := cs.newest[key]; ok && cur.Node == a.Node && cur.Session == a.Session {
		delete(cs.newest, key)
	}
	cs.mu.Unlock()
	if proxy == nil {
		return
	}
	n := proxy.remote
	n.mu.Lock()
	for w, p := range n.pending {
		if p.proxy == proxy {
			delete(n.pending, w)
		}
	}
	n.mu.Unlock()
	cs.srv.endOrphans(cs.srv.router.Remove(proxy.rs), a.ID, failoverNodeGone,
		"is gone (its session on node "+a.Node+" ended or the node is unreachable)")
}

// NodeDown forgets a node whose agents are already down: the requests it
// forwarded here are void (their replies are dropped).
func (cs *clusterState) NodeDown(node string) {
	cs.mu.Lock()
	n := cs.nodes[node]
	delete(cs.nodes, node)
	cs.mu.Unlock()
	if n == nil {
		return
	}
	n.mu.Lock()
	n.gone = true
	clear(n.pending)
	requesters := n.requesters
	n.requesters = nil
	n.mu.Unlock()
	for _, r := range requesters {
		cs.srv.router.Remove(r.rs)
	}
}

// forwardRemote sends a request routed to a remote agent's proxy to the
// agent's node.
func (se *session) forwardRemote(fr []byte, format frameFormat, trace []byte, d router.Delivery[*session], start time.Time) {
	srv := se.srv
	prov := d.Provider.Value()
	n := prov.remote
	w := n.nextW.Add(1)
	n.mu.Lock()
	n.pending[w] = pendingRequest{proxy: prov, delivery: d.ID}
	n.mu.Unlock()
	err := srv.cluster.c.SendRequest(n.name, &cluster.Request{W: w, Org: se.neg.Org, Requester: se.agent, Target: prov.agent, Algo: int8(format), Frame: fr, Trace: trace})
	if err != nil {
		n.mu.Lock()
		delete(n.pending, w)
		n.mu.Unlock()
		code, message := sendFailure(err, "provider "+prov.agent+"'s node")
		srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
		if rep, err := srv.abort(d.Provider, d.ID); err == nil {
			rep.Requester.Value().sendError(transport.ChannelID(rep.Channel), rep.RequestID, 0, code, message, prov.agent)
		}
		return
	}
	srv.metrics.routingSeconds.Observe(time.Since(start).Seconds())
}

// Request delivers a request another node forwarded to one of this node's
// agents, as forwardRequest does for a local requester.
func (cs *clusterState) Request(r *cluster.Request) {
	srv := cs.srv
	start := time.Now()
	// Answered without state: neither a shed request nor one from a node
	// that is not a member gets a requester proxy; the answer still
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
	if d.Provider.Value().remote != nil {
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
	srv.deliverRequest(d, r.Requester, false, r.Frame, frameFormat(r.Algo), trace, start)
}

// announced reports whether node announced agent id of org (and is its
// newest registration here): the only requester a request from node may
// name.
func (cs *clusterState) announced(node, org, id string) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	a, ok := cs.newest[identity{org, id}]
	return ok && a.Node == node
}

// refuse answers request r with the error frame fr (of code) without
// routing it.
func (cs *clusterState) refuse(r *cluster.Request, code negotiate.ErrorCode, fr []byte) {
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
func (cs *clusterState) Reply(r *cluster.Reply) {
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
			srv.endOrphans([]router.Orphan[*session]{o}, r.Provider, failoverNodeGone,
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
func (cs *clusterState) Lost(l *cluster.Lost) {
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
func (cs *clusterState) endPending(p pendingRequest, code negotiate.ErrorCode, message string) {
	cs.srv.metrics.routingFailures.WithLabelValues(string(code)).Inc()
	if rep, err := cs.srv.abort(p.proxy.rs, p.delivery); err == nil {
		rep.Requester.Value().endRequestWithError(transport.ChannelID(rep.Channel), rep.RequestID, code, message, p.proxy.agent)
	}
}

// noticeProvider gives the local provider of node's request w its NOTICE:
// through the open delivery, which it frees (later replies are dropped),
// or, once the delivery is over (its final reply sent), through what this
// node noted when it sent the reply (ref, the provider's session).
func (cs *clusterState) noticeProvider(node string, w uint64, ref any, delivery, ch uint64, code negotiate.ErrorCode, message string) {
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
func (cs *clusterState) Notice(nt *cluster.Notice) {
	cs.noticeProvider(nt.From, nt.W, nt.Ref, nt.Delivery, nt.Channel, negotiate.ErrorCode(nt.Code), nt.Message)
}

// requestersOf returns the requester proxies of node (one per org).
func (cs *clusterState) requestersOf(node string) []*session {
	cs.mu.Lock()
	n := cs.nodes[node]
	cs.mu.Unlock()
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	reqs := make([]*session, 0, len(n.requesters))
	for _, r := range n.requesters {
		reqs = append(reqs, r)
	}
	return reqs
}

// cancelRemote carries a requester's CANCEL to the node of the provider
// whose proxy got the (already freed) delivery.
func (cs *clusterState) cancelRemote(proxy *session, deliveryID uint64) {
	n := proxy.remote
	var w uint64
	n.mu.Lock()
	for k, p := range n.pending { // rare: a scan beats a second map on every request
		if p.proxy == proxy && p.delivery == deliveryID {
			w = k
			delete(n.pending, k)
			break
		}
	}
	n.mu.Unlock()
	if w == 0 || cs.c.SendCancel(n.name, w) != nil {
		cs.srv.metrics.cancels.WithLabelValues("remote_lost").Inc()
		return
	}
	cs.srv.metrics.cancels.WithLabelValues("forwarded_remote").Inc()
}

// Cancel acts on a CANCEL from another node: the request it forwarded (w)
// is freed here, and its provider gets CANCEL as from a local requester.
func (cs *clusterState) Cancel(c *cluster.Cancel) {
	for _, r := range cs.requestersOf(c.From) { // one per org; w is unique across them
		if cn, err := cs.srv.router.Cancel(r.rs, c.W, 0); err == nil {
			cs.srv.cancelProvider(cn.Provider.Value(), cn.DeliveryID, cn.ProviderChannel)
			return
		}
	}
	cs.srv.metrics.cancels.WithLabelValues("not_outstanding").Inc()
}

// replyRemote publishes a reply (or error) to the node whose requester
// proxy se is, n its place among the request's replies (router.Reply.N,
// or cluster.Unnumbered for the daemon's own error). from is the
// provider's session (nil for the daemon's own error), with the delivery
// id and channel it replied on: the one to tell if the reply is lost or
// refused there.
func (se *session) replyRemote(requestID uint64, n uint32, end bool, provider string, format frameFormat, fr []byte, from *session, delivery uint64, ch transport.ChannelID) error {
	r := cluster.Reply{W: requestID, N: n, End: end, Provider: provider, Algo: int8(format), Frame: fr}
	if from != nil {
		r.Ref, r.Delivery, r.Channel = from.ref(), delivery, uint64(ch)
	}
	return se.srv.cluster.c.SendReply(se.remote.name, &r)
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

// orgAnnounceKeys is cluster.Config.OrgKey for the daemon's org secrets:
// this node announces, and takes from other nodes, agents of the orgs it
// has the secret of (nil without org secrets: the open namespace only).
func orgAnnounceKeys(secrets map[string]security.Secret) (func(string) []byte, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	keys := make(map[string][]byte, len(secrets))
	for org, secret := range secrets {
		k, err := cluster.OrgAnnounceKey(secret, org)
		if err != nil {
			return nil, fmt.Errorf("org %q: %w", org, err)
		}
		keys[org] = k[:]
	}
	return func(org string) []byte { return keys[org] }, nil
}

// registerClusterMetrics exports the cluster's counters on /metrics.
func (s *Server) registerClusterMetrics() {
	st := s.cluster.c.Stats()
	gauge := func(name, help string, f func() float64) {
		s.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	counter := func(name, help string, f func() float64) {
		s.metrics.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	gauge("m2md_cluster_nodes", "Other cluster nodes this node hears heartbeats from.", func() float64 { return float64(st.Nodes.Load()) })
	gauge("m2md_cluster_remote_agents", "Agents registered on other nodes, as this node knows them.", func() float64 { return float64(st.RemoteAgents.Load()) })
	gauge("m2md_cluster_inbox_bytes", "Bytes of messages from other nodes waiting for this node's cluster dispatcher (bounded by --cluster-inbox-bytes).", func() float64 { return float64(st.InboxBytes.Load()) })
	counter("m2md_cluster_sent_total", "Requests and replies published to other nodes.", func() float64 { return float64(st.Sent.Load()) })
	counter("m2md_cluster_received_total", "Requests and replies received from other nodes.", func() float64 { return float64(st.Received.Load()) })
	dropped := map[string]*atomic.Uint64{"inbox_full": &st.Shed, "slow_consumer": &st.SlowConsumer}
	for _, r := range cluster.DropReasons() {
		dropped[r.String()] = &st.Dropped[r]
	}
	for reason, v := range dropped {
		s.metrics.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "m2md_cluster_dropped_total", ConstLabels: prometheus.Labels{"reason": reason},
			Help: "Messages from other nodes not delivered, by reason: inbox_full (answered with an error), slow_consumer (dropped by NATS, reported to the sender, which answers them: m2md_cluster_lost_total), malformed, unknown_node (from a node not, or no longer, a member, or with no authenticated identity), bad_signature (a signature or seal that does not verify, or data not sealed), bad_certificate (a certificate that does not chain to --cluster-tls-ca or names another node), replayed (a counter already taken), stale (outside the control messages' time window, or an older incarnation), forbidden (a node speaking for another node, or for an agent of an org it cannot prove it has the secret of).",
		}, func() float64 { return float64(v.Load()) }))
	}
	for outcome, v := range map[string]*atomic.Uint64{"answered": &st.LostAnswered, "unnamed": &st.LostUnnamed} {
		s.metrics.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "m2md_cluster_lost_total", ConstLabels: prometheus.Labels{"outcome": outcome},
			Help: "Requests and replies this node sent that another node reported lost (dropped by NATS, counted there as slow_consumer), by outcome: answered (the requester got queue_full, the provider its NOTICE) or unnamed (no longer remembered: every request between the two nodes was ended with queue_full).",
		}, func() float64 { return float64(v.Load()) }))
	}
	counter("m2md_cluster_send_failed_total", "Publishes that failed because the NATS connection was down (the sender got an error).", func() float64 { return float64(st.SendFailed.Load()) })
	for _, p := range cluster.Protections {
		s.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "m2md_cluster_links", ConstLabels: prometheus.Labels{"auth": p},
			Help: "This node's cluster links (routes to other nodes, and its own connection to NATS), by what protects them: mtls, tls+creds, tls, creds, password, token (its embedded server, on loopback) or none.",
		}, func() float64 { return float64(s.cluster.c.Links(p)) }))
	}
	counter("m2md_cluster_nodes_down_total", "Nodes declared dead (no heartbeat for the dead-after time) or that left.", func() float64 { return float64(st.NodesDown.Load()) })
}

// ClusterStatus is what an operator (or a test) sees of the cluster from
// this node.
type ClusterStatus struct {
	Node         string   // this node's id; empty without a cluster
	Nodes        int      // other nodes alive
	RemoteAgents int      // agents registered on other nodes
	RouteAddr    net.Addr // the embedded route listener (nil in external mode)
}

// Cluster returns the cluster's status; the zero value without a cluster.
func (s *Server) Cluster() ClusterStatus {
	if s.cluster == nil {
		return ClusterStatus{}
	}
	st := s.cluster.c.Stats()
	return ClusterStatus{
		Node:         s.cluster.c.Node(),
		Nodes:        int(st.Nodes.Load()),
		RemoteAgents: int(st.RemoteAgents.Load()),
		RouteAddr:    s.cluster.c.RouteAddr(),
	}
}

// AgentNode reports where this node would route a request addressed to
// agentID of org ("" without org secrets): "" for a local session, the node
// id for a remote one, and false if it knows no such agent.
func (s *Server) AgentNode(org, agentID string) (node string, ok bool) {
	rs, ok := s.router.Lookup(org, agentID)
	if !ok {
		return "", false
	}
	if n := rs.Value().remote; n != nil {
		return n.name, true
	}
	return "", true
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

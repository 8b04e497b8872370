package daemon

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// The daemon as a member of a cluster of daemons joined over NATS
// (docs/operations.md, "Cluster"): it announces its agents to the other
// nodes and registers theirs in its router as agentProxy peers, so that
// routing by agent id and by model - least outstanding first - sees local
// and remote providers alike. Without a cluster none of this exists.

// clusterMember is this node's membership: the registrations it knows,
// the proxies of the other nodes' agents and the nodes themselves. It is
// the cluster.Handler.
type clusterMember struct {
	srv *Server
	c   *cluster.Cluster // the link to the other nodes

	mu      sync.Mutex
	newest  map[identity]cluster.Agent // newest registration known anywhere
	proxies map[string]*agentProxy     // node/session -> proxy of a remote agent
	nodes   map[string]*remoteNode

	// shedFrame is the error frame of every shed request, built once
	// (dispatcher only): an overloaded node must answer what it sheds for
	// less than delivering it would cost, never Brotli each answer.
	// lostFrame, the same for a reply NATS lost (Lost).
	shedFrame, lostFrame []byte
}

func newClusterMember(s *Server) *clusterMember {
	return &clusterMember{
		srv:     s,
		newest:  make(map[identity]cluster.Agent),
		proxies: make(map[string]*agentProxy),
		nodes:   make(map[string]*remoteNode),
	}
}

func proxyKey(node, session string) string { return node + "/" + session }

// identity is an agent's identity across the cluster, as in the router.
type identity struct{ org, id string }

// node returns the remote node's state, created on first contact.
func (cs *clusterMember) node(name string) *remoteNode {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.nodeLocked(name)
}

func (cs *clusterMember) nodeLocked(name string) *remoteNode {
	n := cs.nodes[name]
	if n == nil {
		name = strings.Clone(name) // it may alias a cluster message
		n = &remoteNode{name: name, pending: make(map[uint64]pendingRequest), requesters: make(map[string]*nodeRequester)}
		cs.nodes[name] = n
	}
	return n
}

// register adds a local session to the router under the cluster's rule:
// its registration is stamped newer than any this node has seen for the
// agent id, so it replaces every older one, here and on every node that
// receives the announcement. mayReplace is the daemon's duplicate-session
// policy for a holder on this node (Router.RegisterIf).
func (cs *clusterMember) register(se *session, models []string, mayReplace func(*router.Session[peer]) bool) (rs, replaced *router.Session[peer], err error) {
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
func (cs *clusterMember) unregister(se *session) {
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
func (cs *clusterMember) AgentUp(a cluster.Agent) {
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
	proxy := &agentProxy{remoteEnd{srv: cs.srv, agent: a.ID, node: n}}
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
		if old, local := replaced.Value().(*session); local {
			old.log.Info().Str("by_node", a.Node).Msg("session replaced by a newer one on another node")
			old.initiateClose(negotiate.ReasonReplaced, "a newer session claimed agent id "+a.ID+" on another node")
		}
	}
}

// AgentDown removes a remote agent's proxy; the requests in flight to it
// end with agent_gone.
func (cs *clusterMember) AgentDown(a cluster.Agent) {
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
	n := proxy.node
	n.mu.Lock()
	for w, p := range n.pending {
		if p.proxy == &proxy.remoteEnd {
			delete(n.pending, w)
		}
	}
	n.mu.Unlock()
	cs.srv.endOrphans(cs.srv.router.Remove(proxy.rs), a.ID, failoverNodeGone,
		"is gone (its session on node "+a.Node+" ended or the node is unreachable)")
}

// NodeDown forgets a node whose agents are already down: the requests it
// forwarded here are void (their replies are dropped).
func (cs *clusterMember) NodeDown(node string) {
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

// announced reports whether node announced agent id of org (and is its
// newest registration here): the only requester a request from node may
// name.
func (cs *clusterMember) announced(node, org, id string) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	a, ok := cs.newest[identity{org, id}]
	return ok && a.Node == node
}

// requestersOf returns the requesters standing for node (one per org).
func (cs *clusterMember) requestersOf(node string) []*nodeRequester {
	cs.mu.Lock()
	n := cs.nodes[node]
	cs.mu.Unlock()
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Collect(maps.Values(n.requesters))
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

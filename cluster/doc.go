// Package cluster joins m2md daemons into one mesh over NATS, so that an
// agent connected to one daemon reaches providers connected to any other.
// NATS carries everything; this package adds no gossip of its own.
//
// # Modes
//
// Embedded (Config.Listen, Routes, Cert/CA, User/Password): every daemon
// runs a nats-server in-process whose routes form a full-mesh NATS cluster
// with the other daemons. The daemon's own NATS connection uses an
// ephemeral loopback port closed by a random token; the only port open to
// the network is the route port. Beyond loopback it runs mutual TLS, both
// ends verifying the other's certificate against the cluster CA: Start
// refuses a route listener or route off loopback without Cert and CA, and
// TLS without a CA anywhere (secure.go). A password alone is for loopback.
// External (Config.URLs, CredsFile, NkeyFile, CAFile): the daemon connects
// as a NATS client to an existing deployment; beyond loopback over TLS,
// with an nkey or credentials.
//
// # Subjects
//
// With Config.Name = N: m2md.N.ctl carries control messages to every node
// (heartbeats, agent up/down events, snapshot requests, leave); m2md.N.n.ID
// carries what is addressed to node ID (requests, replies, snapshots). A
// node subscribes to both into one channel, read by one goroutine, so what
// one node publishes reaches another in publish order: a provider's stream
// chunks stay in order, and an agent's up precedes its down.
//
// # Membership and agents
//
// Each node heartbeats every Heartbeat with the sequence number of its last
// agent event. Another node that hears nothing for DeadAfter declares it
// dead: Handler.AgentDown for each of its agents, then NodeDown. Hearing is
// noted as control messages arrive (a second subscription), not when the
// dispatcher reaches them, so a node seconds behind on a backlog does not
// declare its peers dead. A node
// that leaves says so (bye) and is declared gone at once. Agent events
// carry consecutive sequence numbers; a receiver that sees a gap (or a
// heartbeat ahead of what it has) asks for a snapshot of the node's agents
// and reconciles, so lost control messages cost a resync, not a wrong
// table. A new node asks every node for its snapshot when it starts. Every
// control message carries the sender's incarnation, new at each start: a
// node restarted under the same id before the others declared it dead is
// declared dead (its agents down, its requests void) and joins anew. A
// node declared dead for silence is told so (void, seq.go): if it is in
// fact alive and hears this node, it ends the requests it had in flight
// here, which this node dropped, instead of waiting for them.
//
// Which registration of an agent id wins is the daemon's decision
// (Agent.Stamp, Agent.Newer); this package only carries the events.
//
// # Data
//
// Requests and replies are binary (wire.go). A request carries the
// requesting node's id for it (w) and the provider's agent id; every reply
// and error echoes w. Frames travel as the receiving daemon verified them,
// sealed under the key of the two nodes, and are protected again by the
// delivering daemon with the receiving session's keys.
//
// # Authentication
//
// No message is taken on the word of NATS (auth.go): control messages are
// signed with the node's certificate key (Config.Cert, whose CommonName is
// the node id, verified against Config.CA), data messages are encrypted
// and authenticated under a key per pair of nodes and direction, from the
// X25519 keys the control messages carry, and every message's counter is
// taken once. A node speaks only for itself and for agents of the orgs
// whose secret it holds (Config.OrgKey). What fails is dropped, counted
// by reason (Stats.Dropped) and never reaches the Handler.
//
// Handler methods run on the one dispatch goroutine and must not block.
// A node never stalls NATS for the others, and keeps the promise that a
// frame it accepted is delivered or answered with an error: a request or
// reply that finds Config.Inbox messages or Config.InboxBytes bytes waiting
// is handed to the Handler marked Shed, its frame let go on arrival, to be
// answered with an error (the requester's node ends the request; a reply's
// provider node is told with a Notice; inbox.go). What finds Inbox+Headroom
// messages waiting is dropped; the data messages one node sends another
// are numbered, so the receiver sees the gap and the sender answers what
// was lost (Handler.Lost; seq.go), even the first messages after a join.
package cluster

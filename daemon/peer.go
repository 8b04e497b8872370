package daemon

import (
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// peer is what the router holds for each session it routes between. It
// comes in three roles:
//
//   - *session, an agent connected to this daemon: it makes requests and
//     takes them, and what is routed to it goes to its writer's queue;
//   - *agentProxy, an agent connected to another cluster node: it only
//     takes requests, which cross to its node (clusterpeers.go);
//   - *nodeRequester, another node asking this node's agents on behalf of
//     its own (one per org): it only makes requests, and the replies and
//     errors given to it cross back to that node.
//
// The data path asks the peer to take a request, a reply, an error or a
// cancel and does not look at which role it is: a request routed by model
// lands on a local agent or a remote one alike, least outstanding first.
type peer interface {
	// name is the agent id the peer stands for (a node's stand-in:
	// "node-" and the node's id), named in errors.
	name() string
	// homeNode is the cluster node the peer's agent is connected to, ""
	// for an agent connected here.
	homeNode() string
	// marksSlot holds the peer's per-model series as a provider
	// (reqmetrics.go).
	marksSlot() *atomic.Pointer[providerMarks]
	// mayHoldBase reports whether the peer may hold a document's base
	// for deltas sent after it (affinity.go).
	mayHoldBase() bool

	// takeRequest delivers request d, routed to this peer, from its
	// requester; on failure the requester gets the error. trace is the
	// request's trace context, zero if none.
	takeRequest(d router.Delivery[peer], from origin, fr []byte, format frameFormat, trace traced, start time.Time)
	// takeCancel tells the peer its delivery was cancelled (channel: the
	// delivery's channel on its connection, if it has one).
	takeCancel(deliveryID, channel uint64)

	// takeReply hands the peer, a requester, a reply routed to it from
	// provider (provRS, which sent it as deliveryID on provCh). On failure
	// it returns the code and message for the provider's NOTICE.
	takeReply(rep router.Reply[peer], provRS *router.Session[peer], deliveryID uint64, provCh transport.ChannelID, provider string, batch bool, fr []byte, format frameFormat, start time.Time) (negotiate.ErrorCode, string)
	// sendError sends the peer an error frame (REPLY|END, plus flags).
	sendError(ch transport.ChannelID, requestID uint64, flags negotiate.DataFlags, code negotiate.ErrorCode, message, peer string)
	// endRequestWithError ends an outstanding request of the peer whose
	// answer was cut short, with an error that must not be lost.
	endRequestWithError(ch transport.ChannelID, requestID uint64, code negotiate.ErrorCode, message, peer string)
}

// origin is the requester of a request being delivered, as its provider
// sees it.
type origin struct {
	org, agent string
	// batch: the requester takes batched stream chunks (takesBatches);
	// never for a requester on another node.
	batch bool
}

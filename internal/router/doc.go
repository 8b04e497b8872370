// Package router decides where the m2md daemon sends each DATA message
// (docs/protocol.md §4) and remembers what it needs to send the replies
// back. It is the routing core only: it never touches the network, never
// parses bytes and never blocks on I/O, so the daemon can call it on the hot
// path of every message from any number of goroutines.
//
// # Sessions
//
// The daemon registers every accepted session with its org, its agent id,
// the models it serves and an opaque value of its own (the type parameter S,
// usually the daemon's *session), and keeps the returned *Session handle to
// pass back on every call. An identity is (org, agent id): each org is a
// namespace of its own, every lookup below (by agent id, by model) happens in
// the requester's org only, and nothing is ever routed across orgs. A daemon
// without org secrets registers everyone in the open org "". A second
// registration of the same (org, agent id) replaces the first:
// Register unlinks the old session (nothing more is routed to it and its own
// requests are refused) and returns it, so the daemon can send it CLOSE
// REPLACED.
//
// When a session ends, replaced or not, the daemon calls Remove from the
// goroutine that routed the session's messages, after the last one: Remove
// returns the orphans, the requests the session was serving, and the daemon
// sends each requester agent_gone. Doing it there, rather than at the moment
// of replacement, guarantees that no reply routed from the session reaches a
// requester after its agent_gone (by which time the requester may have
// reused the request id). The requests the removed session had made are
// forgotten; their late replies end as ErrRequesterGone.
//
// # Requests
//
// RouteRequest takes a request (DATA without REPLY) and picks its provider:
//
//   - Peer non-empty: the session of the requester's org registered under
//     that agent id, or ErrUnknownAgent. A session may address itself: the request is
//     delivered back to it like to any other provider, which is harmless and
//     useful for tests and loopback agents.
//   - Peer empty: any session of the requester's org serving the model named
//     in the frame's routing header, the one with the fewest outstanding deliveries. Ties are broken
//     round robin: the scan starts just after the previous pick and keeps the
//     first minimum, so equally loaded providers take turns. The
//     requester itself is never chosen by model (an agent that serves a model
//     and asks "anyone serving it" wants someone else, and choosing itself
//     could loop), so if it is the only provider the answer is ErrNoRoute.
//     The scan reads every provider's counter, so its cost grows with the
//     number of providers per model (a few ns each).
//   - A frame without a routing header (TokenNative, or an M2M frame of a
//     schema other than 01 and 04) and no peer: ErrBadFrame.
//
// # Affinity
//
// A request of a known conversation (docs/protocol.md §4.3) names, in
// Request.Prefer, the provider that received the conversation's base (the
// daemon keeps that map, from frame headers). Routing by model then takes
// the preferred provider, if it serves the model and is not the requester,
// while outstanding(preferred) ≤ AffinityFactor (2) × outstanding(least
// loaded) + 1 and below the cap; otherwise the least loaded as above
// (Delivery.Affinity says which: AffinityKept or AffinitySpread). The
// provider that already holds the conversation's prefix (in its KV cache,
// and its copy of the base) is worth a short queue, not a long one. A delta
// frame can only be read by the holder of its base, so it sets
// Request.Require: the preferred provider or nothing, ErrBaseMissing when
// it is gone or no longer serves the model (ErrProviderBusy at its cap).
// Preferring costs one agent lookup and allocates nothing.
//
// On success the router has recorded the delivery under a fresh delivery id,
// non-zero and unique among the provider's outstanding deliveries, which the
// daemon writes as the request_id of the DATA it sends to the provider (with
// the requester's agent id as peer). Delivery ids carry a per-slot
// generation, so a late reply to a finished delivery is recognised as
// unknown even after its slot has been reused.
//
// # Replies
//
// RouteReply maps a provider's reply (REPLY flag, request_id = delivery id)
// back to the requester session, its original request id and the channel
// the request arrived on. A reply without END (a stream chunk) leaves the
// mapping in place; the END reply removes it. The router never buffers or
// reorders: the daemon forwards replies in the order it reads them.
//
// # Failures
//
// Every routing failure is a Reason, which is an error (use errors.Is with the Err
// constants or errors.As to a Reason) and whose Code is the wire error code:
//
//   - Errors from RouteRequest are answered: the daemon sends the requester
//     an error reply (REPLY|END, same request id) with reason.Code(), except
//     ErrSessionClosed (the sender was replaced or removed; its DATA is
//     discarded).
//   - Errors from RouteReply and Abort are never answered (a reply cannot be
//     replied to): the message is dropped. ErrRequesterGone means the
//     requester left, ErrUnknownRequest that no delivery has that id.
//   - Remove returns the orphans as described above (code agent_gone). A
//     delivery the daemon could not hand to its provider is undone with
//     Abort, which says where to send the requester the daemon's own error
//     (e.g. queue_full).
//
// A requester reusing a request id that is still outstanding gets
// ErrDuplicateRequest (code duplicate_request); the original request is
// untouched and still receives its replies. A requester with
// Config.MaxRequests outstanding requests gets ErrTooManyRequests (code
// too_many_requests); a provider with Config.MaxDeliveries outstanding
// deliveries is not chosen by model, and a request addressed to it gets
// ErrProviderBusy (code provider_busy), as does a model whose providers are
// all saturated. These caps keep every table bounded.
//
// # Cost and locking
//
// The registry (agents and models) is behind one RWMutex that only
// registration and removal write. Each session has one mutex for the
// requests it made and one for the deliveries it serves; no two of these are
// ever held by one call except the registry read lock with one provider lock,
// always in that order. Outstanding counts are atomics, so choosing a
// provider takes no session lock. Routing a request and its END reply costs
// a few hundred nanoseconds and allocates nothing in steady state (see the
// benchmarks); failure counters are atomics exposed through Stats and
// Failures for /metrics.
package router

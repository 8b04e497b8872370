package router

// Reason is why the router could not route a message. It is an error:
// compare with errors.Is against the Err constants, or extract it with
// errors.As. Code is the error code of docs/protocol.md §4 that the daemon
// puts in the error reply, when one is sent (see the package doc).
//
// Reasons are small integers, so returning one as an error allocates
// nothing.
type Reason uint8

const (
	// ErrNoRoute: no other connected agent serves the model in the request's
	// routing header.
	ErrNoRoute Reason = iota + 1
	// ErrUnknownAgent: the addressed agent id is not connected.
	ErrUnknownAgent
	// ErrAgentGone: the provider left before its final reply. Carried by the
	// orphans Remove and Register return, never by a route call.
	ErrAgentGone
	// ErrRequesterGone: a reply arrived for a requester that has left; the
	// reply is dropped.
	ErrRequesterGone
	// ErrUnknownRequest: a reply names a delivery id the provider has no
	// outstanding delivery for (never sent, already ended, or aborted); the
	// reply is dropped.
	ErrUnknownRequest
	// ErrDuplicateRequest: the requester already has a request with this id
	// outstanding.
	ErrDuplicateRequest
	// ErrTooManyRequests: the requester has Config.MaxRequests requests
	// outstanding.
	ErrTooManyRequests
	// ErrProviderBusy: the addressed provider, or every provider of the
	// model, has Config.MaxDeliveries deliveries outstanding.
	ErrProviderBusy
	// ErrBadFrame: the request id is 0, or the frame has no routing header
	// (TokenNative, or a schema other than 01/04) and no peer.
	ErrBadFrame
	// ErrSessionClosed: the calling session was removed (or replaced); the
	// daemon discards its DATA without answering.
	ErrSessionClosed

	numReasons = iota + 1 // index 0 is unused
)

var reasonInfo = [numReasons]struct{ code, text string }{
	ErrNoRoute:          {"no_route", "no connected agent serves the requested model"},
	ErrUnknownAgent:     {"unknown_agent", "the addressed agent is not connected"},
	ErrAgentGone:        {"agent_gone", "the provider disconnected before its final reply"},
	ErrRequesterGone:    {"requester_gone", "the requester disconnected before the reply"},
	ErrUnknownRequest:   {"unknown_request", "no outstanding delivery has this request id"},
	ErrDuplicateRequest: {"duplicate_request", "a request with this id is already outstanding"},
	ErrTooManyRequests:  {"too_many_requests", "the session has too many outstanding requests"},
	ErrProviderBusy:     {"provider_busy", "the provider has too many outstanding requests"},
	ErrBadFrame:         {"bad_frame", "request id 0, or a frame without routing header and no peer"},
	ErrSessionClosed:    {"session_closed", "the session is no longer registered"},
}

// Reasons lists every Reason, in declaration order.
func Reasons() []Reason {
	rs := make([]Reason, 0, numReasons-1)
	for r := Reason(1); r < numReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}

// Code is the wire error code, e.g. "no_route"; "unknown" for a value that
// is not a Reason.
func (r Reason) Code() string {
	if r == 0 || r >= numReasons {
		return "unknown"
	}
	return reasonInfo[r].code
}

// String returns Code.
func (r Reason) String() string { return r.Code() }

// Error reads "router: <code>: <explanation>".
func (r Reason) Error() string {
	if r == 0 || r >= numReasons {
		return "router: unknown reason"
	}
	return "router: " + reasonInfo[r].code + ": " + reasonInfo[r].text
}

package router

import "github.com/m2md/m2md/negotiate"

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
	// ErrBaseMissing: a request that only its preferred provider may take
	// (Request.Require: a delta frame) finds it gone or no longer serving
	// the model.
	ErrBaseMissing

	numReasons = iota + 1 // index 0 is unused
)

var reasonInfo = [numReasons]struct {
	code negotiate.ErrorCode
	text string
}{
	ErrNoRoute:          {negotiate.CodeNoRoute, "no connected agent serves the requested model"},
	ErrUnknownAgent:     {negotiate.CodeUnknownAgent, "the addressed agent is not connected"},
	ErrAgentGone:        {negotiate.CodeAgentGone, "the provider disconnected before its final reply"},
	ErrRequesterGone:    {negotiate.CodeRequesterGone, "the requester disconnected before the reply"},
	ErrUnknownRequest:   {negotiate.CodeUnknownRequest, "no outstanding delivery has this request id"},
	ErrDuplicateRequest: {negotiate.CodeDuplicateRequest, "a request with this id is already outstanding"},
	ErrTooManyRequests:  {negotiate.CodeTooManyRequests, "the session has too many outstanding requests"},
	ErrProviderBusy:     {negotiate.CodeProviderBusy, "the provider has too many outstanding requests"},
	ErrBadFrame:         {negotiate.CodeBadFrame, "request id 0, or a frame without routing header and no peer"},
	ErrSessionClosed:    {negotiate.CodeSessionClosed, "the session is no longer registered"},
	ErrBaseMissing:      {negotiate.CodeBaseMissing, "no connected provider of the model holds the base of this delta"},
}

// Reasons lists every Reason, in declaration order.
func Reasons() []Reason {
	rs := make([]Reason, 0, numReasons-1)
	for r := Reason(1); r < numReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}

// Code is the wire error code, e.g. negotiate.CodeNoRoute; "unknown" for
// a value that is not a Reason.
func (r Reason) Code() negotiate.ErrorCode {
	if r == 0 || r >= numReasons {
		return "unknown"
	}
	return reasonInfo[r].code
}

// String returns Code's text.
func (r Reason) String() string { return string(r.Code()) }

// Error reads "router: <code>: <explanation>".
func (r Reason) Error() string {
	if r == 0 || r >= numReasons {
		return "router: unknown reason"
	}
	return "router: " + string(reasonInfo[r].code) + ": " + reasonInfo[r].text
}

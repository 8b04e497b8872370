package negotiate

// RejectCode is the code of a REJECT (docs/protocol.md §3.3).
type RejectCode string

const (
	RejectVersionMismatch   RejectCode = "VERSION_MISMATCH"
	RejectNoCommonAlgorithm RejectCode = "NO_COMMON_ALGORITHM"
	RejectSecurityPolicy    RejectCode = "SECURITY_POLICY"
	RejectRateLimited       RejectCode = "RATE_LIMITED"
	RejectServerBusy        RejectCode = "SERVER_BUSY"
	RejectUnknown           RejectCode = "UNKNOWN"
)

func (c RejectCode) sentinel() error {
	switch c {
	case RejectVersionMismatch:
		return ErrVersionMismatch
	case RejectNoCommonAlgorithm:
		return ErrNoCommonAlgorithm
	case RejectSecurityPolicy:
		return ErrSecurityPolicy
	case RejectRateLimited:
		return ErrRateLimited
	case RejectServerBusy:
		return ErrServerBusy
	case RejectUnknown:
		return ErrRejectUnknown
	}
	return nil
}

// CloseReason is the reason of a CLOSE (docs/protocol.md §3.5).
type CloseReason string

const (
	ReasonNormal         CloseReason = "NORMAL"
	ReasonTimeout        CloseReason = "TIMEOUT"
	ReasonError          CloseReason = "ERROR"
	ReasonClientShutdown CloseReason = "CLIENT_SHUTDOWN"
	ReasonServerShutdown CloseReason = "SERVER_SHUTDOWN"
	// ReasonReplaced: a newer session claimed this agent id. A client must not
	// reconnect automatically after it.
	ReasonReplaced CloseReason = "REPLACED"
)

// ErrorCode is the code of an error reply or a notice (docs/protocol.md §4):
// the "code" member of its {"error":{…}} body, written on the wire as the
// constant's text. The daemon sends the codes below; a provider may send any
// code, so a receiver keeps a code it does not know as it came.
type ErrorCode string

// Codes the daemon sends (docs/protocol.md §4).
const (
	CodeNoRoute          ErrorCode = "no_route"
	CodeUnknownAgent     ErrorCode = "unknown_agent"
	CodeAgentGone        ErrorCode = "agent_gone"
	CodeQueueFull        ErrorCode = "queue_full"
	CodeBadFrame         ErrorCode = "bad_frame"
	CodeBadTag           ErrorCode = "bad_tag"
	CodeReplay           ErrorCode = "replay"
	CodeTooLarge         ErrorCode = "too_large"
	CodeShutdown         ErrorCode = "shutdown"
	CodeDuplicateRequest ErrorCode = "duplicate_request"
	CodeRateLimited      ErrorCode = "rate_limited"
	CodeTooManyRequests  ErrorCode = "too_many_requests"
	CodeProviderBusy     ErrorCode = "provider_busy"
	CodeRequesterGone    ErrorCode = "requester_gone"
	// CodeCancelled: the final reply to a request its requester cancelled
	// (§4.1); also what a provider answers a CANCEL with.
	CodeCancelled ErrorCode = "cancelled"
	// CodeBaseMissing: a delta request's base is not held where it must be
	// (§4.3): no connected provider holds it (from the daemon), or the
	// provider does not know it or the reconstructed document fails the
	// frame's CRC-32 (from the provider). The requester resends the full
	// document.
	CodeBaseMissing ErrorCode = "base_missing"
)

// Codes the Go client sends as a provider (docs/protocol.md §4).
const (
	// CodeNoHandler: the agent received a request but serves none.
	CodeNoHandler ErrorCode = "no_handler"
	// CodeNoResponse: the handler returned without a final reply.
	CodeNoResponse ErrorCode = "no_response"
	// CodeHandlerPanic: the handler panicked.
	CodeHandlerPanic ErrorCode = "handler_panic"
)

// Codes the daemon counts in its metrics but never sends: the frame they
// would answer is dropped.
const (
	// CodeUnknownRequest: a reply names no outstanding delivery.
	CodeUnknownRequest ErrorCode = "unknown_request"
	// CodeSessionClosed: the sending session is no longer registered.
	CodeSessionClosed ErrorCode = "session_closed"
)

// String returns the code's wire text.
func (c ErrorCode) String() string { return string(c) }

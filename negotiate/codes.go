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

// Known reports whether c is one of the codes of protocol version 1.
func (c RejectCode) Known() bool { return c.sentinel() != nil }

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

// Known reports whether r is one of the reasons of protocol version 1.
func (r CloseReason) Known() bool {
	switch r {
	case ReasonNormal, ReasonTimeout, ReasonError, ReasonClientShutdown, ReasonServerShutdown, ReasonReplaced:
		return true
	}
	return false
}

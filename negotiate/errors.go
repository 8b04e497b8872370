package negotiate

import (
	"errors"
	"fmt"
)

// Errors for malformed messages. Every parse error wraps exactly one of these,
// with the detail (offset, member path, value) in the message.
var (
	// ErrUnknownKind: the message's first byte is not CONTROL, DATA or
	// CANCEL, or the message is empty.
	ErrUnknownKind = errors.New("negotiate: unknown message kind")
	// ErrNotControl: a CONTROL message was expected and this is another kind.
	ErrNotControl = errors.New("negotiate: not a CONTROL message")
	// ErrNotData: a DATA message was expected and this is another kind.
	ErrNotData = errors.New("negotiate: not a DATA message")
	// ErrBadDataHeader: the DATA header is truncated or violates §4.
	ErrBadDataHeader = errors.New("negotiate: malformed DATA header")
	// ErrBadCancel: a CANCEL message is truncated or violates §4.1.
	ErrBadCancel = errors.New("negotiate: malformed CANCEL")
	// ErrControlTooLarge: a CONTROL message exceeds MaxControlSize.
	ErrControlTooLarge = errors.New("negotiate: CONTROL message too large")
	// ErrMalformedControl: the envelope or its payload is not valid JSON,
	// breaks a limit, or lacks or mistypes a required member.
	ErrMalformedControl = errors.New("negotiate: malformed CONTROL message")
)

// Errors of the session logic.
var (
	// ErrUnexpectedMessage: a message that the current state does not allow
	// (a protocol violation: answer with CLOSE ERROR, or disconnect before
	// the session exists).
	ErrUnexpectedMessage = errors.New("negotiate: message not allowed in this state")
	// ErrAfterClose: a message that arrived after this side sent CLOSE. It is
	// not a violation (the peer may not have seen the CLOSE yet): discard it.
	ErrAfterClose = errors.New("negotiate: message after CLOSE, discarded")
	// ErrClosed: the session is over; nothing may be sent or received.
	ErrClosed = errors.New("negotiate: session closed")
	// ErrSessionMismatch: a control message names another session id.
	ErrSessionMismatch = errors.New("negotiate: session id mismatch")
	// ErrBadAccept: the daemon's ACCEPT is malformed or contradicts the HELLO.
	ErrBadAccept = errors.New("negotiate: invalid ACCEPT")
	// ErrAuthDowngrade: the client holds an agent key but the daemon did not
	// confirm authentication, or confirmed one the client did not offer.
	ErrAuthDowngrade = errors.New("negotiate: authentication not confirmed by daemon")
	// ErrBadConfirmation: the ACCEPT's key confirmation (docs/protocol.md
	// §5.1) does not match: the HELLO or the ACCEPT was changed in transit,
	// or the peer is not the daemon holding the agent key. It comes wrapped
	// together with ErrBadAccept.
	ErrBadConfirmation = errors.New("negotiate: ACCEPT key confirmation does not match")
	// ErrHandshakeDone: a ClientHandshake was used after it finished.
	ErrHandshakeDone = errors.New("negotiate: handshake already finished")
	// ErrConfig: a ServerConfig or ClientConfig value is out of range.
	ErrConfig = errors.New("negotiate: invalid configuration")
	// ErrReplay: a protected frame's sequence number or channel id is not the
	// expected one (docs/protocol.md §5.3).
	ErrReplay = errors.New("negotiate: replayed or reordered frame")
	// ErrTooManyChannels: a Sealer's channel table is full.
	ErrTooManyChannels = errors.New("negotiate: too many channels")
)

// Sentinels matched by a *RejectError with the corresponding code, so that
// errors.Is(err, ErrVersionMismatch) works on what Server.Accept and
// ClientHandshake.Accept return. ErrRejected matches every *RejectError.
var (
	ErrRejected          = errors.New("negotiate: rejected")
	ErrVersionMismatch   = errors.New("negotiate: " + string(RejectVersionMismatch))
	ErrNoCommonAlgorithm = errors.New("negotiate: " + string(RejectNoCommonAlgorithm))
	ErrSecurityPolicy    = errors.New("negotiate: " + string(RejectSecurityPolicy))
	ErrRateLimited       = errors.New("negotiate: " + string(RejectRateLimited))
	ErrServerBusy        = errors.New("negotiate: " + string(RejectServerBusy))
	ErrRejectUnknown     = errors.New("negotiate: " + string(RejectUnknown))
)

// RejectError is a negotiation failure: on the daemon, the REJECT it sends;
// on the client, the REJECT it received.
type RejectError struct {
	Code    RejectCode
	Message string
	cause   error
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("negotiate: REJECT %s: %q", e.Code, e.Message)
}

// Is matches ErrRejected and the sentinel of e.Code.
func (e *RejectError) Is(target error) bool {
	if target == ErrRejected {
		return true
	}
	return target == e.Code.sentinel()
}

// Unwrap returns the parse error behind a REJECT UNKNOWN of a malformed
// HELLO, or nil.
func (e *RejectError) Unwrap() error { return e.cause }

func rejectf(code RejectCode, format string, args ...any) *RejectError {
	return &RejectError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CloseError reports a CLOSE received from the peer.
type CloseError struct {
	Reason  CloseReason
	Message string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("negotiate: peer closed the session: %s: %q", e.Reason, e.Message)
}

// Is matches ErrClosed.
func (e *CloseError) Is(target error) bool { return target == ErrClosed }

// SequenceError details an ErrReplay.
type SequenceError struct {
	// Channel is the channel the frame arrived on.
	Channel uint32
	// FrameChannel is the channel id written in the frame.
	FrameChannel uint32
	// Got is the frame's sequence number, Want the expected one.
	Got, Want uint64
}

func (e *SequenceError) Error() string {
	if e.FrameChannel != e.Channel {
		return fmt.Sprintf("negotiate: frame for channel %d arrived on channel %d", e.FrameChannel, e.Channel)
	}
	return fmt.Sprintf("negotiate: channel %d: sequence %d, expected %d", e.Channel, e.Got, e.Want)
}

// Is matches ErrReplay.
func (e *SequenceError) Is(target error) bool { return target == ErrReplay }

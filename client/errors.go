package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/m2md/m2md/negotiate"
)

var (
	// ErrClosed reports a client that is over: Close was called, or the
	// session ended and will not be re-established (reconnection disabled,
	// CLOSE REPLACED, a permanent REJECT). When the session ended on its
	// own the error also wraps the cause, e.g. a *negotiate.CloseError with
	// reason REPLACED.
	ErrClosed = errors.New("client: closed")
	// ErrConnectionLost reports a request that was in flight when its
	// session ended. It wraps the cause (a *negotiate.CloseError for a CLOSE
	// from the daemon, transport.ErrClosed for a dropped connection). The
	// request may or may not have reached its provider; it is not retried.
	ErrConnectionLost = errors.New("client: connection lost")
	// ErrBadFrame reports a received frame this client refused: its
	// protection did not verify (security.ErrVerificationFailed, …), its
	// sequence number was wrong (negotiate.ErrReplay), or its payload did not
	// decode (frame.ErrChecksum, frame.ErrLimit, …). The cause is wrapped.
	ErrBadFrame = errors.New("client: bad frame")
	// ErrTooLarge reports a request or reply whose frame exceeds the
	// negotiated max_payload, or a Do response above MaxResponseSize.
	ErrTooLarge = errors.New("client: too large")
	// ErrSlowConsumer reports a Stream whose unread replies exceeded the
	// buffer limit: the reader fell so far behind that the stream was cut
	// rather than let memory grow or stall every other request.
	ErrSlowConsumer = errors.New("client: stream reader too slow, replies dropped")
	// ErrDeliveryCancelled is returned by a ResponseWriter whose delivery
	// has ended before the handler finished: the daemon sent a notice (the
	// requester is gone, its queue is full, …; wrapped as a *RemoteError),
	// the session ended, or the client is closing.
	ErrDeliveryCancelled = errors.New("client: delivery cancelled")
	// ErrResponded is returned by a ResponseWriter after the final reply
	// (Respond or Error) has been sent.
	ErrResponded = errors.New("client: final reply already sent")
	// ErrUnsupportedFrame reports a received frame in a format this client
	// does not decode (TokenNative).
	ErrUnsupportedFrame = errors.New("client: unsupported frame format")
)

// RemoteError is an error reply: an M2M v1 frame of schema 0x10 carrying
// {"error":{"message":…,"type":…,"code":…}}, sent by the daemon (no_route,
// agent_gone, …) or by the provider. Match it with errors.As.
type RemoteError struct {
	// From is the agent that answered; empty when the daemon did.
	From string
	// Code is the body's "code", e.g. negotiate.CodeNoRoute; a provider may
	// send a code of its own.
	Code    negotiate.ErrorCode
	Message string
	// Type is the error's "type" member ("m2md_error" from m2md).
	Type string
}

func (e *RemoteError) Error() string {
	src := "daemon"
	if e.From != "" {
		src = "agent " + e.From
	}
	if e.Message == "" {
		return fmt.Sprintf("client: error from %s: %s", src, e.Code)
	}
	return fmt.Sprintf("client: error from %s: %s: %s", src, e.Code, e.Message)
}

// errorBody is the OpenAI-style error document of an error reply.
type errorBody struct {
	Error *struct {
		Message json.RawMessage `json:"message"`
		Type    json.RawMessage `json:"type"`
		Code    json.RawMessage `json:"code"`
	} `json:"error"`
}

// parseRemoteError reads the JSON of an error reply. The members are
// optional and may have any type (OpenAI sends "code": null, some servers
// numbers): strings are taken as they are, anything else as its JSON text,
// so that an odd error still reaches the caller as a RemoteError rather
// than as a parse failure.
func parseRemoteError(from string, body []byte) (*RemoteError, error) {
	var doc errorBody
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("%w: error reply: %w", ErrBadFrame, err)
	}
	if doc.Error == nil {
		return nil, fmt.Errorf("%w: error reply without an \"error\" object", ErrBadFrame)
	}
	return &RemoteError{
		From:    from,
		Code:    negotiate.ErrorCode(jsonText(doc.Error.Code)),
		Message: jsonText(doc.Error.Message),
		Type:    jsonText(doc.Error.Type),
	}, nil
}

// jsonText renders a JSON value as text: a string's contents, "" for null
// or absent, otherwise the value's JSON.
func jsonText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

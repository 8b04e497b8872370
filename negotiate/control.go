package negotiate

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/jsonscan"
)

// MessageType is a control message's "type".
type MessageType string

const (
	TypeHello  MessageType = "HELLO"
	TypeAccept MessageType = "ACCEPT"
	TypeReject MessageType = "REJECT"
	TypePing   MessageType = "PING"
	TypePong   MessageType = "PONG"
	TypeClose  MessageType = "CLOSE"
)

func (t MessageType) known() bool {
	switch t {
	case TypeHello, TypeAccept, TypeReject, TypePing, TypePong, TypeClose:
		return true
	}
	return false
}

// Control message limits (docs/protocol.md §3).
const (
	// MaxControlSize bounds a CONTROL message, kind byte included, in every
	// state: HELLO and ACCEPT are the largest and stay far below it.
	MaxControlSize = 65536
	// maxControlDepth is the JSON nesting limit of the wire reference §8;
	// a valid envelope needs 4.
	maxControlDepth = frame.DefaultMaxDepth
	maxControlItems = frame.DefaultMaxArray
)

// ControlMessage is a parsed or to-be-written CONTROL message: the envelope
// and its typed payload. Exactly the payload field of Type is used.
type ControlMessage struct {
	Type MessageType
	// SessionID is "" when absent (HELLO, REJECT of a HELLO).
	SessionID string
	// Timestamp is the sender's clock, Unix epoch milliseconds.
	Timestamp int64
	// Capabilities is the payload of HELLO and ACCEPT.
	Capabilities *Capabilities
	// Reject is the payload of REJECT.
	Reject *Reject
	// Close is the payload of CLOSE.
	Close *Close

	// signedAt is where the HELLO's proof or the ACCEPT's confirmation is
	// written in the envelope (after the kind byte), recorded by
	// AppendControl and ParseControl; signed0 is the received envelope
	// with it blanked: the bytes the proof covers, or the ACCEPT as the
	// transcript hashes it (docs/protocol.md §5).
	signedAt span
	signed0  []byte
}

// Reject is the REJECT payload.
type Reject struct {
	Code    RejectCode
	Message string
}

// Close is the CLOSE payload.
type Close struct {
	Reason  CloseReason
	Message string
}

// Time returns Timestamp as a time.Time.
func (m *ControlMessage) Time() time.Time { return time.UnixMilli(m.Timestamp) }

// ParseControl reads a CONTROL message (kind byte first).
//
// Strictness: the message is at most MaxControlSize bytes of UTF-8 JSON
// nested at most 32 deep; member names match exactly; a known member given
// twice, a missing required member ("type", "timestamp", the payload of
// HELLO, ACCEPT and REJECT and its required members) or one of the wrong type
// is an error; unknown members are ignored; null equals absent for optional
// members. ACCEPT requires a well-formed session id and "negotiated".
func ParseControl(msg []byte) (*ControlMessage, error) {
	if len(msg) == 0 || Kind(msg[0]) != KindControl {
		return nil, ErrNotControl
	}
	if len(msg) > MaxControlSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrControlTooLarge, len(msg), MaxControlSize)
	}
	root, err := parseJSON(msg[1:], jsonscan.Limits{MaxDepth: maxControlDepth, MaxArray: maxControlItems, MaxMembers: maxControlItems, MaxString: MaxControlSize})
	if err != nil {
		return nil, err
	}
	if root.Kind != jsonscan.KindObject {
		return nil, fmt.Errorf("%w: envelope is a JSON %s, not an object", ErrMalformedControl, kindName(root.Kind))
	}
	env := jsonObj{v: &root}
	m := &ControlMessage{}

	typ, _, err := env.str("type", true)
	if err != nil {
		return nil, err
	}
	m.Type = MessageType(typ)
	if !m.Type.known() {
		return nil, env.errorf("type", "unknown message type %q", truncateForError(typ))
	}
	if m.SessionID, _, err = env.str("session_id", false); err != nil {
		return nil, err
	}
	ts, _, err := env.uint("timestamp", true)
	if err != nil {
		return nil, err
	}
	if ts > math.MaxInt64 {
		return nil, env.errorf("timestamp", "%d exceeds 2^63-1", ts)
	}
	m.Timestamp = int64(ts)

	payloadRequired := m.Type == TypeHello || m.Type == TypeAccept || m.Type == TypeReject
	payload, ok, err := env.object("payload", payloadRequired)
	if err != nil {
		return nil, err
	}
	if !ok {
		// PING, PONG, CLOSE: absent payload means {}.
		payload = jsonObj{v: &jsonValue{doc: root.doc, Node: jsonscan.Node{Kind: jsonscan.KindObject}}, path: "payload."}
	}
	switch m.Type {
	case TypeHello, TypeAccept:
		if m.Capabilities, err = decodeCapabilities(payload, &m.signedAt); err != nil {
			return nil, err
		}
		if m.Type == TypeAccept {
			if !ValidSessionID(m.SessionID) {
				return nil, env.errorf("session_id", "ACCEPT needs a session id of the form sess_ + 20 of [A-Za-z0-9], got %q", truncateForError(m.SessionID))
			}
			if m.Capabilities.Negotiated == nil {
				return nil, payload.errorf("negotiated", "required member missing")
			}
		}
		if m.signedAt != (span{}) {
			m.signed0 = blankAt(msg[1:], m.signedAt)
		}
	case TypeReject:
		code, _, err := payload.str("code", true)
		if err != nil {
			return nil, err
		}
		msgText, _, err := payload.str("message", false)
		if err != nil {
			return nil, err
		}
		m.Reject = &Reject{Code: RejectCode(code), Message: msgText}
	case TypeClose:
		reason, ok, err := payload.str("reason", false)
		if err != nil {
			return nil, err
		}
		if !ok {
			reason = string(ReasonNormal) // the Rust reference sends CLOSE {}
		}
		msgText, _, err := payload.str("message", false)
		if err != nil {
			return nil, err
		}
		m.Close = &Close{Reason: CloseReason(reason), Message: msgText}
	}
	return m, nil
}

// AppendControl appends m as a CONTROL message (kind byte, then the compact
// JSON envelope with members in the Rust reference's order: type,
// session_id, payload, timestamp).
func AppendControl(dst []byte, m *ControlMessage) ([]byte, error) {
	if !m.Type.known() {
		return dst, fmt.Errorf("%w: unknown message type %q", ErrMalformedControl, m.Type)
	}
	if m.Timestamp < 0 {
		return dst, fmt.Errorf("%w: negative timestamp", ErrMalformedControl)
	}
	switch m.Type {
	case TypeHello, TypeAccept:
		if m.Capabilities == nil {
			return dst, fmt.Errorf("%w: %s without capabilities", ErrMalformedControl, m.Type)
		}
		if m.Type == TypeAccept && (m.Capabilities.Negotiated == nil || !ValidSessionID(m.SessionID)) {
			return dst, fmt.Errorf("%w: ACCEPT needs a session id and negotiated values", ErrMalformedControl)
		}
	case TypeReject:
		if m.Reject == nil {
			return dst, fmt.Errorf("%w: REJECT without payload", ErrMalformedControl)
		}
	}
	dst = append(dst, byte(KindControl))
	base := len(dst)
	dst = append(dst, `{"type":`...)
	dst = jsonscan.AppendString(dst, string(m.Type))
	if m.SessionID != "" {
		dst = append(dst, `,"session_id":`...)
		dst = jsonscan.AppendString(dst, m.SessionID)
	}
	dst = append(dst, `,"payload":`...)
	switch m.Type {
	case TypeHello, TypeAccept:
		dst = appendCapabilities(dst, m.Capabilities, base, &m.signedAt)
	case TypeReject:
		dst = append(dst, `{"code":`...)
		dst = jsonscan.AppendString(dst, string(m.Reject.Code))
		dst = append(dst, `,"message":`...)
		dst = jsonscan.AppendString(dst, m.Reject.Message)
		dst = append(dst, '}')
	case TypeClose:
		c := m.Close
		if c == nil {
			c = &Close{Reason: ReasonNormal}
		}
		dst = append(dst, `{"reason":`...)
		dst = jsonscan.AppendString(dst, string(c.Reason))
		dst = append(dst, `,"message":`...)
		dst = jsonscan.AppendString(dst, c.Message)
		dst = append(dst, '}')
	default:
		dst = append(dst, "{}"...)
	}
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendInt(dst, m.Timestamp, 10)
	return append(dst, '}'), nil
}

// AppendPing appends a PING of session id at time now.
func AppendPing(dst []byte, sessionID string, now time.Time) []byte {
	return appendSimple(dst, TypePing, sessionID, now)
}

// AppendPong appends a PONG of session id at time now.
func AppendPong(dst []byte, sessionID string, now time.Time) []byte {
	return appendSimple(dst, TypePong, sessionID, now)
}

func appendSimple(dst []byte, t MessageType, sessionID string, now time.Time) []byte {
	dst, _ = AppendControl(dst, &ControlMessage{Type: t, SessionID: sessionID, Timestamp: unixMilli(now)})
	return dst
}

// AppendClose appends a CLOSE (or the acknowledgement of one: same reason).
func AppendClose(dst []byte, sessionID string, now time.Time, reason CloseReason, message string) []byte {
	dst, _ = AppendControl(dst, &ControlMessage{Type: TypeClose, SessionID: sessionID, Timestamp: unixMilli(now),
		Close: &Close{Reason: reason, Message: message}})
	return dst
}

// AppendReject appends a REJECT of a HELLO (no session id).
func AppendReject(dst []byte, now time.Time, code RejectCode, message string) []byte {
	dst, _ = AppendControl(dst, &ControlMessage{Type: TypeReject, Timestamp: unixMilli(now),
		Reject: &Reject{Code: code, Message: message}})
	return dst
}

// unixMilli clamps times before the epoch to 0: timestamps are unsigned on
// the wire.
func unixMilli(t time.Time) int64 {
	if ms := t.UnixMilli(); ms > 0 {
		return ms
	}
	return 0
}

package negotiate

import (
	"errors"
	"fmt"

	"github.com/m2md/m2md/security"
)

// DataFlags are the DATA header's flag bits (docs/protocol.md §4).
type DataFlags uint8

const (
	// FlagReply marks a reply to the request with the same request id.
	FlagReply DataFlags = 1 << 0
	// FlagEnd marks the last reply of a request; only together with FlagReply.
	FlagEnd DataFlags = 1 << 1
	// FlagNotice marks a daemon error about a reply this agent sent: the
	// request_id is the delivery id the agent received, not one it chose.
	// Only together with FlagReply and FlagEnd.
	FlagNotice DataFlags = 1 << 2
	// FlagBatch (feature batch, docs/protocol.md §4.4): on a request the
	// daemon delivers, the requester takes batched stream chunks; on a
	// reply (never with FlagEnd), the frame's JSON is an array of stream
	// chunks (AppendBatch, SplitBatch).
	FlagBatch DataFlags = 1 << 3
	// FlagOnce (feature once, docs/protocol.md §4, "Failover"): on a
	// request from a requester, the daemon must not deliver it again to
	// another provider when its provider is lost before replying. Never
	// on a reply.
	FlagOnce DataFlags = 1 << 4
	// FlagTrace (feature trace, docs/protocol.md §4.8): a trace block
	// (W3C trace context) follows the peer. Never on a reply.
	FlagTrace DataFlags = 1 << 5

	knownDataFlags = FlagReply | FlagEnd | FlagNotice | FlagBatch | FlagOnce | FlagTrace
)

func (f DataFlags) valid() bool {
	return f&^knownDataFlags == 0 && (f&FlagEnd == 0 || f&FlagReply != 0) &&
		(f&FlagNotice == 0 || f&(FlagReply|FlagEnd) == FlagReply|FlagEnd) &&
		(f&FlagBatch == 0 || f&FlagEnd == 0) &&
		(f&FlagOnce == 0 || f&FlagReply == 0) &&
		(f&FlagTrace == 0 || f&FlagReply == 0)
}

// IsOnce reports FlagOnce.
func (h *DataHeader) IsOnce() bool { return h.Flags&FlagOnce != 0 }

// DATA header limits.
const (
	// maxPeerLen is the longest peer agent id in a DATA header.
	maxPeerLen = security.MaxIDLen
	// MaxDataHeaderLen is the longest DATA header: kind, flags, a 10-byte
	// request id, the peer length and a 128-byte peer.
	MaxDataHeaderLen = 1 + 1 + maxUvarintLen + 1 + maxPeerLen
	// maxTracedDataHeaderLen is the longest DATA header with a trace
	// block (docs/protocol.md §4.8).
	maxTracedDataHeaderLen = MaxDataHeaderLen + MaxTraceLen

	maxUvarintLen = 10
)

// DataHeader is a parsed DATA header.
type DataHeader struct {
	Flags     DataFlags
	RequestID uint64
	// Peer aliases the parsed message: copy it to keep it beyond the
	// message's lifetime. Empty means "route by model" in a request.
	Peer []byte
	// Trace is the request's trace block (FlagTrace, docs/protocol.md
	// §4.8), checked and aliasing the message; nil when not traced.
	Trace []byte
}

// IsReply reports FlagReply.
func (h *DataHeader) IsReply() bool { return h.Flags&FlagReply != 0 }

// IsNotice reports FlagNotice.
func (h *DataHeader) IsNotice() bool { return h.Flags&FlagNotice != 0 }

// IsBatch reports FlagBatch.
func (h *DataHeader) IsBatch() bool { return h.Flags&FlagBatch != 0 }

// IsEnd reports FlagEnd.
func (h *DataHeader) IsEnd() bool { return h.Flags&FlagEnd != 0 }

// AppendDataHeader appends a DATA message's header (kind byte included) to
// dst; the frame follows it. It refuses what ParseData would refuse, so a
// sender cannot emit a message its peer must drop.
func AppendDataHeader(dst []byte, flags DataFlags, requestID uint64, peer string) ([]byte, error) {
	if flags&FlagTrace != 0 {
		return dst, fmt.Errorf("%w: FlagTrace without a trace block (AppendTracedDataHeader)", ErrBadDataHeader)
	}
	return appendDataHeader(dst, flags, requestID, peer, nil)
}

// AppendTracedDataHeader is AppendDataHeader for a traced request: it sets
// FlagTrace and writes trace, a block from AppendTrace or a DataHeader.Trace
// (docs/protocol.md §4.8), after the peer. An empty trace writes an
// untraced header.
func AppendTracedDataHeader(dst []byte, flags DataFlags, requestID uint64, peer string, trace []byte) ([]byte, error) {
	if len(trace) == 0 {
		return AppendDataHeader(dst, flags, requestID, peer)
	}
	if n, err := traceLen(trace); err != nil || n != len(trace) {
		return dst, fmt.Errorf("%w: trace block of %d bytes is malformed", ErrBadDataHeader, len(trace))
	}
	return appendDataHeader(dst, flags|FlagTrace, requestID, peer, trace)
}

func appendDataHeader(dst []byte, flags DataFlags, requestID uint64, peer string, trace []byte) ([]byte, error) {
	if !flags.valid() {
		return dst, fmt.Errorf("%w: flags %#02x", ErrBadDataHeader, uint8(flags))
	}
	if requestID == 0 {
		return dst, fmt.Errorf("%w: request id 0", ErrBadDataHeader)
	}
	if len(peer) > maxPeerLen {
		return dst, fmt.Errorf("%w: peer of %d bytes exceeds %d", ErrBadDataHeader, len(peer), maxPeerLen)
	}
	for i := 0; i < len(peer); i++ {
		if !security.IDByte(peer[i]) {
			return dst, fmt.Errorf("%w: peer byte %#02x outside [A-Za-z0-9_-]", ErrBadDataHeader, peer[i])
		}
	}
	dst = append(dst, byte(KindData), byte(flags))
	dst = appendUvarint(dst, requestID)
	dst = append(dst, byte(len(peer)))
	dst = append(dst, peer...)
	return append(dst, trace...), nil
}

// AppendData appends a whole DATA message: header and frame. The frame must
// not be empty.
func AppendData(dst []byte, flags DataFlags, requestID uint64, peer string, frame []byte) ([]byte, error) {
	if len(frame) == 0 {
		return dst, fmt.Errorf("%w: empty frame", ErrBadDataHeader)
	}
	dst, err := AppendDataHeader(dst, flags, requestID, peer)
	if err != nil {
		return dst, err
	}
	return append(dst, frame...), nil
}

// ParseData reads a DATA message. The returned Peer and frame alias msg. It
// does not allocate, except to build an error.
//
// The request id must be a minimal uvarint (one encoding per value), non-zero
// and at most 10 bytes; unknown flag bits, FlagEnd without FlagReply, a peer
// longer than 128 bytes or outside [A-Za-z0-9_-], and an empty frame are
// refused. The frame itself is not inspected.
func ParseData(msg []byte) (DataHeader, []byte, error) {
	var h DataHeader
	if len(msg) == 0 || Kind(msg[0]) != KindData {
		return h, nil, ErrNotData
	}
	if len(msg) < 2 {
		return h, nil, fmt.Errorf("%w: %d bytes, no flags", ErrBadDataHeader, len(msg))
	}
	h.Flags = DataFlags(msg[1])
	if !h.Flags.valid() {
		return h, nil, fmt.Errorf("%w: flags %#02x", ErrBadDataHeader, msg[1])
	}
	id, pos, err := readRequestID(msg, 2)
	if err != nil {
		return h, nil, fmt.Errorf("%w: %w", ErrBadDataHeader, err)
	}
	h.RequestID = id
	if pos >= len(msg) {
		return h, nil, fmt.Errorf("%w: peer length missing", ErrBadDataHeader)
	}
	peerLen := int(msg[pos])
	pos++
	if peerLen > maxPeerLen {
		return h, nil, fmt.Errorf("%w: peer length %d exceeds %d", ErrBadDataHeader, peerLen, maxPeerLen)
	}
	if len(msg)-pos < peerLen {
		return h, nil, fmt.Errorf("%w: peer length %d exceeds remaining %d bytes", ErrBadDataHeader, peerLen, len(msg)-pos)
	}
	peer := msg[pos : pos+peerLen : pos+peerLen]
	for _, c := range peer {
		if !security.IDByte(c) {
			return h, nil, fmt.Errorf("%w: peer byte %#02x outside [A-Za-z0-9_-]", ErrBadDataHeader, c)
		}
	}
	pos += peerLen
	if h.Flags&FlagTrace != 0 {
		n, err := traceLen(msg[pos:])
		if err != nil {
			return h, nil, fmt.Errorf("%w: %w", ErrBadDataHeader, err)
		}
		h.Trace = msg[pos : pos+n : pos+n]
		pos += n
	}
	if pos == len(msg) {
		return h, nil, fmt.Errorf("%w: no frame", ErrBadDataHeader)
	}
	h.Peer = peer
	return h, msg[pos:], nil
}

func appendUvarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// readRequestID reads the request id at msg[pos:]: a minimal uvarint of at
// most 10 bytes, non-zero. It returns the position after it.
func readRequestID(msg []byte, pos int) (uint64, int, error) {
	start := pos
	var id uint64
	for shift := uint(0); ; shift += 7 {
		if pos >= len(msg) {
			return 0, pos, errors.New("request id truncated")
		}
		b := msg[pos]
		pos++
		n := pos - start
		if n == maxUvarintLen && b > 1 {
			return 0, pos, errors.New("request id overflows 64 bits")
		}
		id |= uint64(b&0x7f) << shift
		if b < 0x80 {
			if b == 0 && n > 1 {
				return 0, pos, errors.New("request id not minimally encoded")
			}
			break
		}
	}
	if id == 0 {
		return 0, pos, errors.New("request id 0")
	}
	return id, pos, nil
}

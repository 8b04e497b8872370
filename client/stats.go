package client

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/negotiate"
)

// Stats counts a Client's traffic over its whole life, across reconnections.
// Wire bytes are DATA messages as handed to the transport (DATA header and
// protected frame; not the transport's own framing, TLS or QUIC overhead);
// JSON bytes are the documents before encoding and after decoding. Their
// ratio is what M2M framing and Brotli saved.
type Stats struct {
	Requests       uint64 // requests sent (Do, Stream, SendFrame)
	Replies        uint64 // replies received for them (chunks and final)
	Deliveries     uint64 // requests delivered to this agent (served or refused)
	BusyRejections uint64 // deliveries answered provider_busy (MaxConcurrentHandlers reached)
	Notices        uint64 // notices received about this agent's replies
	LateReplies    uint64 // replies to requests nobody waits for any more, dropped
	BadFrames      uint64 // received frames refused (verification, sequence, decoding)
	Reconnects     uint64 // sessions established after the first
	// CancelsSent counts CANCELs sent for this client's requests (context
	// ended or stream closed early); CancelsReceived those that stopped a
	// handler here.
	CancelsSent     uint64
	CancelsReceived uint64
	// Conversations (feature delta, docs/protocol.md §4.3): requests sent
	// as a delta, requests sent again in full after base_missing (the
	// caller never saw it), deliveries rebuilt from a delta, deliveries
	// answered base_missing.
	DeltasSent     uint64
	DeltaResends   uint64
	DeltasReceived uint64
	BasesMissing   uint64
	// Reply deltas (docs/protocol.md §4.3): final responses this provider
	// sent compressed against the request they answer, and final
	// responses this requester received so and rebuilt.
	ReplyDeltasSent     uint64
	ReplyDeltasReceived uint64

	FramesSent        uint64
	FramesReceived    uint64
	WireBytesSent     uint64
	WireBytesReceived uint64
	JSONBytesSent     uint64 // JSON encoded into frames this client sent
	JSONBytesReceived uint64 // JSON decoded from frames this client received
}

// SendRatio is JSON bytes per wire byte of what this client sent; above 1
// means the frames were smaller than the JSON. 0 before anything was sent.
func (s Stats) SendRatio() float64 { return ratio(s.JSONBytesSent, s.WireBytesSent) }

// ReceiveRatio is the same for received frames. JSON is counted when a
// reply is decoded, wire bytes when it arrives, so replies that are dropped
// unread (an abandoned stream) lower it.
func (s Stats) ReceiveRatio() float64 { return ratio(s.JSONBytesReceived, s.WireBytesReceived) }

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// counters is the live, atomic form of Stats.
type counters struct {
	requests, replies, deliveries, busy, notices, late, badFrames, reconnects atomic.Uint64
	framesSent, framesReceived                                                atomic.Uint64
	cancelsSent, cancelsReceived                                              atomic.Uint64
	deltasSent, deltaResends, deltasReceived, basesMissing                    atomic.Uint64
	replyDeltasSent, replyDeltasReceived                                      atomic.Uint64
	wireSent, wireReceived, jsonSent, jsonReceived                            atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Requests:            c.requests.Load(),
		Replies:             c.replies.Load(),
		Deliveries:          c.deliveries.Load(),
		BusyRejections:      c.busy.Load(),
		Notices:             c.notices.Load(),
		LateReplies:         c.late.Load(),
		BadFrames:           c.badFrames.Load(),
		Reconnects:          c.reconnects.Load(),
		CancelsSent:         c.cancelsSent.Load(),
		CancelsReceived:     c.cancelsReceived.Load(),
		DeltasSent:          c.deltasSent.Load(),
		DeltaResends:        c.deltaResends.Load(),
		DeltasReceived:      c.deltasReceived.Load(),
		BasesMissing:        c.basesMissing.Load(),
		ReplyDeltasSent:     c.replyDeltasSent.Load(),
		ReplyDeltasReceived: c.replyDeltasReceived.Load(),
		FramesSent:          c.framesSent.Load(),
		FramesReceived:      c.framesReceived.Load(),
		WireBytesSent:       c.wireSent.Load(),
		WireBytesReceived:   c.wireReceived.Load(),
		JSONBytesSent:       c.jsonSent.Load(),
		JSONBytesReceived:   c.jsonReceived.Load(),
	}
}

// SessionInfo describes the current session.
type SessionInfo struct {
	// ID is the session id from ACCEPT; "" while there is no session.
	ID      string
	AgentID string
	// Daemon is the daemon's agent_id from ACCEPT.
	Daemon string
	// Transport is "quic" or "ws".
	Transport  string
	RemoteAddr net.Addr
	// Params is what the daemon negotiated.
	Params negotiate.Negotiated
	// Established is when ACCEPT arrived.
	Established time.Time
}

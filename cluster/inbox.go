package cluster

// The inbox: what other nodes send this node, waiting for its dispatcher,
// bounded in messages and in bytes.
//
// NATS delivers both of the node's subjects into one channel (arrive), in
// the order the server sent them. A channel subscription is the only kind
// that keeps two subjects in one order, and the only kind to which nats.go
// applies no pending limits: its byte limit (SetPendingLimits) is for
// callback and synchronous subscriptions, whose messages wait in a list of
// their own per subject. So one goroutine (receive) does nothing but move
// each message on into the inbox, counting its bytes: it keeps up with the
// NATS reader, and arrive holds little more than the message in hand.
//
// What is neither sealed nor a control message is dropped on arrival
// (no node sends it), and so is a control message over maxControl. A
// request or reply that finds Config.Inbox messages or Config.InboxBytes
// bytes waiting is shed there and then: it is cut to its header (its frame
// is let go at once, before it waits) and handed to the Handler marked
// Shed, to be answered with an error. Control messages are not shed, but
// one over maxControlOver (a snapshot) is dropped at the bounds, and asked
// for again later. Beyond Inbox+Headroom messages waiting, what arrives is
// dropped, as NATS drops what its channel cannot take, and its sender
// learns it from the sequence numbers (seq.go). So what waits holds at
// most InboxBytes of messages, plus the one that crossed the bound (at
// most MaxMessage), and at most Inbox+Headroom control messages of at most
// maxControlOver each and headers of what was shed.

// inMsg is a message waiting for the dispatcher.
type inMsg struct {
	data []byte
	shed bool // cut to its header on arrival (a request or reply): answer it with an error
	// from is set when take opened the message's seal to shed it: data is
	// then the data message inside, and nonce the seal's (auth.go).
	from  *member
	nonce uint64
}

// arriveCap is the capacity of the channel NATS delivers into. The receive
// goroutine empties it as fast as NATS fills it; the room is for the
// moments that goroutine waits for a core while the NATS reader runs.
const arriveCap = 4096

// inboxCap is how many messages may wait for the dispatcher: the bound
// plus the headroom, in which the dispatcher answers what was shed.
func inboxCap(cfg *Config) int { return cfg.Inbox + cfg.Headroom }

// receive moves what NATS delivers into the inbox, in order.
func (c *Cluster) receive() {
	defer c.wg.Done()
	for {
		select {
		case m := <-c.arrive:
			c.take(m.Data)
		case <-c.done:
			return
		}
	}
}

// take queues b for the dispatcher, shed if the inbox is at either bound.
// To shed a request or reply it opens its seal here (the dispatcher opens
// the others): only what is inside tells a request from a cancel, and the
// frame is what must be let go.
func (c *Cluster) take(b []byte) {
	// Nothing here is authenticated yet: what no node sends (anything but
	// a sealed or a control message) and what no node sends this large is
	// let go before it waits, or it would wait whole past the bounds.
	if len(b) == 0 || (b[0] != kindSealed && b[0] != kindControl) {
		c.drop(DropBadSignature, "") // data that is not sealed
		return
	}
	if b[0] == kindControl && len(b) > maxControl {
		c.drop(DropMalformed, "")
		return
	}
	in := inMsg{data: b}
	if len(c.inbox) >= c.cfg.Inbox || c.stats.InboxBytes.Load() >= int64(c.cfg.InboxBytes) {
		if b[0] == kindControl {
			if len(b) > maxControlOver {
				// A snapshot waits for room: this node asks for it
				// again (checkPeers) once it has waited DeadAfter.
				c.overflow.Add(1)
				return
			}
		} else {
			inner, m, n, ok := c.open(b)
			if !ok {
				return
			}
			in = inMsg{data: inner, from: m, nonce: n}
			if inner[0] == kindRequest || inner[0] == kindReply {
				cut, ok := cutFrame(inner)
				if !ok {
					c.drop(DropMalformed, m.node)
					return
				}
				in.data, in.shed = cut, true
			}
		}
	}
	n := int64(len(in.data))
	c.stats.InboxBytes.Add(n)
	select {
	case c.inbox <- in:
	default:
		c.stats.InboxBytes.Add(-n)
		c.overflow.Add(1)
	}
}

// maxControl is the largest control message taken: a snapshot of every
// agent of a node (DefaultMaxSessions of them, each up to a few hundred
// bytes with its models) fits, with room, and nothing larger is decoded.
const maxControl = 8 << 20

// maxControlOver is the largest control message taken while the inbox is
// at its bounds: heartbeats and agent events are far smaller, so that what
// waits beyond InboxBytes is at most Inbox+Headroom messages this small.
const maxControlOver = 64 << 10

// cutFrame returns a copy of request or reply b without its frame but for
// the frame's first byte, so that it still decodes; false if b does not
// decode.
func cutFrame(b []byte) ([]byte, bool) {
	var frame []byte
	if b[0] == kindRequest {
		var r Request
		if decodeRequest(b, &r) != nil {
			return nil, false
		}
		frame = r.Frame
	} else {
		var r Reply
		if decodeReply(b, &r) != nil {
			return nil, false
		}
		frame = r.Frame
	}
	return append([]byte(nil), b[:len(b)-len(frame)+1]...), true
}

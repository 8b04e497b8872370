package transport

import (
	"context"
	"errors"

	"github.com/quic-go/quic-go"
)

// ShareDataChannel makes c's AcquireChannel return one data channel for
// every request from now on, however many are outstanding, for a peer that
// takes several requests outstanding on one channel: on QUIC, sessions
// that negotiated feature shared_stream (docs/protocol.md §1, §3.6).
// Call it before the first AcquireChannel. A QUIC stream in flight costs
// both ends a STREAM frame of its own in the packets, flow-control updates
// and a reader; with one stream a batch's messages go to quic-go in one
// Write and leave packed in as few packets as they fill. On WebSocket,
// which has one channel anyway, it does nothing.
func ShareDataChannel(c Conn) {
	if q, ok := c.(*quicConn); ok {
		q.shared.Store(true)
	}
}

// acquireShared returns the data stream this side sends its requests on,
// opening it first if there is none yet or the one there was broke. As
// AcquireChannel's pool, it waits only where quic-go would: at the peer's
// stream limit, and not at all with an ended ctx.
func (c *quicConn) acquireShared(ctx context.Context) (ChannelID, error) {
	if id, ok, err := c.sharedStream(); ok || err != nil {
		return id, err
	}
	if err := acquire(ctx, c.opening, c.done); err != nil {
		return 0, err
	}
	defer func() { <-c.opening }()
	if id, ok, err := c.sharedStream(); ok || err != nil {
		return id, err // opened while this call waited
	}
	str, err := c.qc.OpenStream()
	if _, atLimit := errors.AsType[*quic.StreamLimitReachedError](err); atLimit {
		str, err = c.qc.OpenStreamSync(ctx)
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return 0, ctxErr
		}
		if c.isClosing() {
			return 0, ErrClosed
		}
		return 0, closedBy(err)
	}
	s, err := c.addStream(str, true)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.one = s
	c.mu.Unlock()
	return s.id, nil
}

// sharedStream reports the live shared stream, if there is one.
func (c *quicConn) sharedStream() (ChannelID, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closing:
		return 0, false, ErrClosed
	case c.one != nil && !c.one.dead:
		return c.one.id, true, nil
	}
	return 0, false, nil
}

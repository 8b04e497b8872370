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
// opening it first if there is none yet or the one there was broke. It
// opens under c.mu, which quic-go's OpenStream never blocks, so that
// concurrent first calls share one stream and none of them waits, with an
// ended ctx least of all (the daemon's deliveries must never wait). Only
// at the peer's stream limit does it wait for the peer to allow another,
// as long as ctx lets it.
func (c *quicConn) acquireShared(ctx context.Context) (ChannelID, error) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return 0, ErrClosed
	}
	if s := c.one; s != nil && !s.dead {
		c.mu.Unlock()
		return s.id, nil
	}
	str, err := c.qc.OpenStream()
	if err == nil {
		s, err := c.addStreamLocked(str, true)
		if err == nil {
			c.one = s
		}
		c.mu.Unlock()
		if err != nil {
			return 0, err
		}
		go c.readLoop(s)
		return s.id, nil
	}
	c.mu.Unlock()
	if _, atLimit := errors.AsType[*quic.StreamLimitReachedError](err); !atLimit {
		if c.isClosing() {
			return 0, ErrClosed
		}
		return 0, closedBy(err)
	}
	if str, err = c.qc.OpenStreamSync(ctx); err != nil {
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
	// Another call may have got a stream too while this one waited: the
	// newest serves from now on; the other's requests still get their
	// replies on it.
	c.one = s
	c.mu.Unlock()
	return s.id, nil
}

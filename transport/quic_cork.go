package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/internal/bufpool"
)

// On QUIC a Send makes no system call: quic-go copies a small write into
// the stream's pending STREAM frame, and its send loop packs the frames of
// every stream into packets, sent with GSO (one sendmsg per train of
// packets) where the kernel supports it. What a Cork saves here is per
// stream: the messages a batch has for one stream (a streamed reply's
// chunks, control messages) are framed into one buffer and handed to
// quic-go in one Write, one STREAM frame and one wake-up of its send loop
// instead of one per message.
type quicCork struct {
	corks atomic.Int32
	// writes counts the Writes of held messages (tests read it).
	writes atomic.Uint64

	mu      sync.Mutex
	streams []*quicStream // streams holding messages
	spare   []*quicStream // streams' backing array, reused between batches
}

// Cork holds the messages sent until the matching Uncork.
func (c *quicConn) Cork() { c.cork.corks.Add(1) }

// Uncork ends a Cork; the last one to end writes what each stream holds,
// one Write per stream. The first error is returned; a stream whose write
// failed fails later Sends as Send would have.
func (c *quicConn) Uncork() error {
	if n := c.cork.corks.Add(-1); n > 0 {
		return nil
	} else if n < 0 {
		panic("transport: Uncork without Cork")
	}
	streams := c.takeHeld()
	var first error
	for _, s := range streams {
		// Waits out a Send blocked on this stream: Close ends every such
		// wait (and Close's own flush finds nothing of these streams').
		s.sendMu <- struct{}{}
		err := c.writeHeld(s, true, c.done)
		<-s.sendMu
		if err != nil && first == nil {
			first = err
		}
	}
	c.putHeld(streams)
	return first
}

// send writes msg on s, or holds it while a Cork is under way. The caller
// holds s.sendMu.
func (c *quicConn) send(ctx context.Context, s *quicStream, msg []byte) error {
	if c.cork.corks.Load() > 0 && 4+len(msg) <= corkMax {
		if s.held != nil && len(*s.held)+4+len(msg) > corkMax {
			if err := c.writeHeld(s, true, c.done); err != nil {
				return err
			}
		}
		if s.held == nil {
			s.held = bufpool.Get(corkMax)
			*s.held = (*s.held)[:0]
			c.cork.mu.Lock()
			if c.cork.streams == nil {
				c.cork.streams, c.cork.spare = c.cork.spare, nil
			}
			c.cork.streams = append(c.cork.streams, s)
			c.cork.mu.Unlock()
		}
		var hdr [4]byte
		putFrameHeader(hdr[:], len(msg))
		*s.held = append(append(*s.held, hdr[:]...), msg...)
		return nil
	}
	// Whatever a batch left on this stream goes first.
	if err := c.writeHeld(s, true, c.done); err != nil {
		return err
	}
	return c.write(ctx, s, msg)
}

func (c *quicConn) takeHeld() []*quicStream {
	c.cork.mu.Lock()
	defer c.cork.mu.Unlock()
	streams := c.cork.streams
	c.cork.streams = nil
	return streams
}

func (c *quicConn) putHeld(streams []*quicStream) {
	clear(streams)
	c.cork.mu.Lock()
	if c.cork.spare == nil {
		c.cork.spare = streams[:0]
	}
	c.cork.mu.Unlock()
}

// writeHeld writes what s holds in one Write; the caller holds s.sendMu.
// arm clears a deadline an earlier Send left (shutdown sets its own);
// giveUp ends the wait for the data turn (takeDataTurn).
func (c *quicConn) writeHeld(s *quicStream, arm bool, giveUp <-chan struct{}) error {
	b := s.held
	if b == nil {
		return nil
	}
	s.held = nil
	defer bufpool.Put(b)
	if s.broken != nil {
		return &ChannelError{Channel: s.id, Err: s.broken}
	}
	ctx := context.Background()
	took, err := c.takeDataTurn(ctx, s, giveUp)
	if err != nil {
		return err
	}
	defer c.giveDataTurn(took)
	var stop func() bool
	if arm {
		stop = c.armDeadline(ctx, s)
	}
	c.cork.writes.Add(1)
	first := s.announce()
	written, err := s.str.Write(*b)
	c.disarmDeadline(s, stop)
	if err == nil {
		return nil
	}
	s.unannounce(first, written)
	return c.writeFailed(ctx, s, written, len(*b), err)
}

// flushHeldForClose writes what a batch holds (Close may be called inside
// one), each stream's within the close timeout, before the streams are
// finished.
func (c *quicConn) flushHeldForClose(lingerOver <-chan struct{}) {
	streams := c.takeHeld()
	deadline := time.Now().Add(c.cfg.CloseTimeout)
	for _, s := range streams {
		select {
		case s.sendMu <- struct{}{}:
			if s.held != nil {
				s.str.SetWriteDeadline(deadline)
				s.deadlineSet = true
				_ = c.writeHeld(s, false, lingerOver) // a failure: the stream's end tells the peer
			}
			<-s.sendMu
		case <-lingerOver:
			return
		}
	}
}

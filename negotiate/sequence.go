package negotiate

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultMaxChannels bounds a Sequences table when no limit is given: above
// any stream limit m2md's transports configure.
const DefaultMaxChannels = 1024

// Sequences holds one session's per-channel sequence numbers in both
// directions (docs/protocol.md §5.3): the next number to send, starting at
// 1, and the next number expected.
//
// Concurrency: the table is safe for concurrent use. A ChannelSequence is
// lock-free (atomics), so any goroutine may use it; but numbers must reach
// the wire in order, so the caller serializes "take a number, protect the
// frame, Send" per channel (one writer per channel at a time, which the
// transport's one-request-per-stream rule already gives), and checks
// received frames of a channel from the goroutine that reads it.
//
// Memory is bounded: at most max channels, each a few words; Drop a
// channel's state when the channel closes.
type Sequences struct {
	mu    sync.Mutex
	chans map[uint32]*ChannelSequence
	max   int
}

// ChannelSequence is one channel's pair of counters.
type ChannelSequence struct {
	id       uint32
	sent     atomic.Uint64 // last number handed out
	received atomic.Uint64 // last number accepted
}

// NewSequences returns a table for at most maxChannels channels; 0 means
// DefaultMaxChannels.
func NewSequences(maxChannels int) *Sequences {
	if maxChannels <= 0 {
		maxChannels = DefaultMaxChannels
	}
	return &Sequences{chans: make(map[uint32]*ChannelSequence), max: maxChannels}
}

// Channel returns channel id's counters, creating them (both at 0) on first
// use. It fails with ErrTooManyChannels when the table is full. Keep the
// result for the channel's lifetime to skip the lookup per frame.
func (s *Sequences) Channel(id uint32) (*ChannelSequence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.chans[id]; ok {
		return c, nil
	}
	if len(s.chans) >= s.max {
		return nil, fmt.Errorf("%w: limit %d", ErrTooManyChannels, s.max)
	}
	c := &ChannelSequence{id: id}
	s.chans[id] = c
	return c, nil
}

// Drop forgets a closed channel. A channel id used again starts over at 1.
func (s *Sequences) Drop(id uint32) {
	s.mu.Lock()
	delete(s.chans, id)
	s.mu.Unlock()
}

// Len is the number of channels with state.
func (s *Sequences) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.chans)
}

// NextSend is shorthand for Channel(id) then NextSend.
func (s *Sequences) NextSend(id uint32) (uint64, error) {
	c, err := s.Channel(id)
	if err != nil {
		return 0, err
	}
	return c.NextSend(), nil
}

// CheckReceive is shorthand for Channel(arrivedOn) then CheckReceive.
func (s *Sequences) CheckReceive(arrivedOn, frameChannel uint32, seq uint64) error {
	c, err := s.Channel(arrivedOn)
	if err != nil {
		return err
	}
	return c.CheckReceive(frameChannel, seq)
}

// ID is the channel id.
func (c *ChannelSequence) ID() uint32 { return c.id }

// NextSend returns the sequence number for the next frame sent on the
// channel: 1, 2, 3, …
func (c *ChannelSequence) NextSend() uint64 { return c.sent.Add(1) }

// CheckReceive accepts a received frame's sequence number and channel id
// (both read from the frame) if the channel id is this channel's and the
// number is exactly the next one expected, and then advances the counter. A
// refused frame (ErrReplay, detailed by *SequenceError) leaves the counter
// as it was, so one forged frame cannot desynchronize the channel.
func (c *ChannelSequence) CheckReceive(frameChannel uint32, seq uint64) error {
	want := c.received.Load() + 1
	if frameChannel == c.id && seq == want && c.received.CompareAndSwap(want-1, want) {
		return nil
	}
	return &SequenceError{Channel: c.id, FrameChannel: frameChannel, Got: seq, Want: want}
}

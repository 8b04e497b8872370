package negotiate

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/security"
)

// DefaultMaxChannels bounds a Sealer's channel table when no limit is
// given: above any stream limit m2md's transports configure.
const DefaultMaxChannels = 1024

// Sealer is one direction of a session's frame protection (docs/protocol.md
// §5): its frame key and a sequence counter per channel. The side that
// sends numbers a frame, then protects it (Seal); the side that receives
// opens it, then checks its number (Open). A session holds two, one per
// direction (Session.Sealers).
//
// A channel's number is taken only when the frame was protected, and
// accepted only when it is exactly the next one: a frame that fails either
// way leaves the counter as it was, so the channel stays in step.
//
// Concurrency: safe for concurrent use. Numbers must reach the wire in
// order, so the caller serializes "Seal, then Send" per channel (one
// writer per channel at a time, which the transports' one-request-per-
// stream rule already gives), and opens a channel's frames from the
// goroutine that reads it.
//
// Memory is bounded: at most maxChannels channels, each one counter.
type Sealer struct {
	key *security.FrameKey // nil in mode none
	// compact: the session negotiated feature compact (docs/protocol.md
	// §4.5): Seal writes what it may in the compact form, Open takes it.
	compact bool

	mu    sync.Mutex
	chans map[uint32]*atomic.Uint64 // last number taken (sending) or accepted (receiving)
	max   int
}

// NewSealer returns a Sealer for frames of mode protected with key (unused
// in mode none), for at most maxChannels channels; 0 means
// DefaultMaxChannels.
func NewSealer(mode frame.Security, key []byte, maxChannels int) (*Sealer, error) {
	if maxChannels <= 0 {
		maxChannels = DefaultMaxChannels
	}
	s := &Sealer{max: maxChannels}
	if mode != frame.SecurityNone {
		k, err := security.NewFrameKey(mode, key)
		if err != nil {
			return nil, err
		}
		s.key = k
	}
	return s, nil
}

// Sealers returns the Sealer of the frames this side sends and that of the
// frames it receives, in the session's security mode. They keep their own
// copies of the keys: the session may be wiped afterwards.
func (s *Session) Sealers(maxChannels int) (send, recv *Sealer, err error) {
	if send, err = NewSealer(s.Params.SecurityMode, s.SendKey(), maxChannels); err != nil {
		return nil, nil, err
	}
	if recv, err = NewSealer(s.Params.SecurityMode, s.ReceiveKey(), maxChannels); err != nil {
		return nil, nil, err
	}
	if s.Params.Has(FeatureCompact) {
		send.EnableCompact()
		recv.EnableCompact()
	}
	return send, recv, nil
}

// EnableCompact makes s write (Seal) and take (Open) the compact form of
// feature compact (docs/protocol.md §4.5), for a session that negotiated
// it: Session.Sealers does this. Call it before s is used.
func (s *Sealer) EnableCompact() { s.compact = true }

// Overhead is the number of bytes Seal adds to a frame.
func (s *Sealer) Overhead() int {
	if s.key == nil {
		return 0
	}
	return security.Overhead(s.key.Mode())
}

// Protected reports whether frames are protected (mode hmac or aead).
func (s *Sealer) Protected() bool { return s.key != nil }

// counter returns channel ch's counter, creating it at 0 on first use.
func (s *Sealer) counter(ch uint32) (*atomic.Uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.chans[ch]; ok {
		return c, nil
	}
	if len(s.chans) >= s.max {
		return nil, fmt.Errorf("%w: limit %d", ErrTooManyChannels, s.max)
	}
	if s.chans == nil {
		s.chans = make(map[uint32]*atomic.Uint64)
	}
	c := new(atomic.Uint64)
	s.chans[ch] = c
	return c, nil
}

// Seal writes channel ch's next sequence number and ch into the reserved
// bytes of the plain M2M v1 frame fr and protects it, in place when fr has
// Overhead spare capacity (otherwise the result is a new slice). It returns
// the frame as it goes on the wire: in a session with feature compact, in
// the compact form when the frame may take it (docs/protocol.md §4.5),
// which is shorter and written over the frame. On error no number was
// taken.
func (s *Sealer) Seal(ch uint32, fr []byte) ([]byte, error) {
	c, err := s.counter(ch)
	if err != nil {
		return nil, err
	}
	n := c.Load() + 1
	if err := frame.SetSequence(fr, n, ch); err != nil {
		return nil, err
	}
	if s.key != nil {
		if fr, err = s.key.Protect(fr[:0], fr); err != nil {
			return nil, err
		}
	}
	c.Store(n)
	if s.compact {
		if cf, ok := frame.AppendCompact(fr[:0], fr, ch); ok {
			fr = cf
		}
	}
	return fr, nil
}

// Open verifies or decrypts the M2M v1 frame fr, received on channel ch, in
// place and accepts its sequence number if the frame names ch and carries
// exactly the channel's next number (ErrReplay, detailed by
// *SequenceError, otherwise). It returns the plain frame. In mode none
// frames carry numbers that are not checked, and Open only refuses a frame
// too short to have a security byte (frame.ErrTruncated) or whose security
// byte is not none (security.ErrWrongMode).
//
// A compact frame (docs/protocol.md §4.5) is first rebuilt into a new
// buffer, then opened like any; in a session without feature compact it
// is refused (ErrUnknownFrame).
//
// Classify a refusal with RefusalCode.
func (s *Sealer) Open(ch uint32, fr []byte) ([]byte, error) {
	if len(fr) > 0 && fr[0] == frame.CompactMarker {
		if !s.compact {
			return nil, fmt.Errorf("%w: a compact frame (first byte 43 'C') in a session without feature compact", ErrUnknownFrame)
		}
		full, err := frame.AppendExpand(make([]byte, 0, len(fr)+frame.MaxCompactGrowth), fr, ch)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCompactFrame, err)
		}
		fr = full
	}
	if s.key == nil {
		if len(fr) <= frame.OffSecurity {
			return nil, fmt.Errorf("%w: frame of %d bytes has no security byte", frame.ErrTruncated, len(fr))
		}
		if m := frame.Security(fr[frame.OffSecurity]); m != frame.SecurityNone {
			return nil, fmt.Errorf("%w: frame in mode %s in a session of mode none", security.ErrWrongMode, m)
		}
		return fr, nil
	}
	plain, err := s.key.Open(fr[:0], fr)
	if err != nil {
		return nil, err
	}
	seq, fch, err := frame.Sequence(plain)
	if err != nil {
		return nil, err
	}
	if err := s.accept(ch, fch, seq); err != nil {
		return nil, err
	}
	return plain, nil
}

// accept takes seq, numbered for channel fch, as channel ch's next number
// if it is exactly that; otherwise the counter stays as it was.
func (s *Sealer) accept(ch, fch uint32, seq uint64) error {
	c, err := s.counter(ch)
	if err != nil {
		return err
	}
	want := c.Load() + 1
	if fch != ch || seq != want || !c.CompareAndSwap(want-1, want) {
		return &SequenceError{Channel: ch, FrameChannel: fch, Got: seq, Want: want}
	}
	return nil
}

// Expected is the sequence number Open accepts next on channel ch (1 on a
// channel not seen yet).
func (s *Sealer) Expected(ch uint32) uint64 {
	s.mu.Lock()
	c := s.chans[ch]
	s.mu.Unlock()
	if c == nil {
		return 1
	}
	return c.Load() + 1
}

// ErrCompactFrame: a compact frame (docs/protocol.md §4.5) that does not
// rebuild into an M2M v1 frame. Its code is bad_frame (RefusalCode): no
// sequence number is taken.
var ErrCompactFrame = errors.New("negotiate: malformed compact frame")

// RefusalCode is the error code that answers a frame Open refused: replay
// for a sequence number out of step or a frame numbered for another
// channel; bad_frame for a mode-none frame without a security byte, a
// full channel table or a frame of no known form (ErrUnknownFrame); bad_tag for anything else (the frame did not verify
// or decrypt, is not a well-formed frame of the session's mode, or is in
// another mode).
func RefusalCode(err error) ErrorCode {
	switch {
	case errors.Is(err, ErrReplay):
		return CodeReplay
	case errors.Is(err, ErrTooManyChannels), errors.Is(err, frame.ErrTruncated), errors.Is(err, ErrUnknownFrame), errors.Is(err, ErrCompactFrame):
		return CodeBadFrame
	}
	return CodeBadTag
}

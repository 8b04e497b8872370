package negotiate

import (
	"encoding/binary"
	"fmt"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/security"
)

// Sealed TokenNative (docs/protocol.md §4.2, feature tn_sealed): in an hmac
// or aead session that negotiated FeatureTNSealed, a TokenNative frame
// travels in an envelope
//
//	'T' (54) ‖ security byte ‖ u64 LE sequence ‖ u32 LE channel ‖ protected TokenNative frame
//
// sealed with the direction's frame key, with the DATA header of the
// message that carries it as associated data. The sequence is the
// channel's, shared with the M2M v1 frames on that channel.

// SealedTNMarker is the first byte of a sealed TokenNative envelope: never
// the first byte of an M2M v1 frame ('#') or of a TokenNative frame (a
// tokenizer byte, 00-02).
const SealedTNMarker = 'T'

// sealedTNHeadLen is the clear head of the envelope.
const sealedTNHeadLen = 14

// SealedTNOverhead is what sealing adds to a TokenNative frame in mode.
func SealedTNOverhead(mode frame.Security) int {
	if mode == frame.SecurityNone {
		return 0
	}
	return sealedTNHeadLen + security.Overhead(mode)
}

// IsSealedTN reports whether the frame of a DATA message is a sealed
// TokenNative envelope.
func IsSealedTN(fr []byte) bool { return len(fr) > 0 && fr[0] == SealedTNMarker }

// SealTokenNative appends to dst the envelope of the TokenNative frame tn,
// sent on channel ch in the DATA message whose header is dataHeader
// (kind byte through the peer id), numbered with the channel's next
// sequence. On error no number was taken. In mode none it is an error:
// TokenNative then travels as it is.
func (s *Sealer) SealTokenNative(dst []byte, ch uint32, dataHeader, tn []byte) ([]byte, error) {
	if s.key == nil {
		return nil, fmt.Errorf("%w: sealing TokenNative in mode none", security.ErrWrongMode)
	}
	c, err := s.counter(ch)
	if err != nil {
		return nil, err
	}
	n := c.Load() + 1
	var head [sealedTNHeadLen]byte
	head[0] = SealedTNMarker
	head[1] = byte(s.key.Mode())
	binary.LittleEndian.PutUint64(head[2:], n)
	binary.LittleEndian.PutUint32(head[10:], ch)
	if dst, err = s.key.SealEnvelope(dst, dataHeader, head[:], tn); err != nil {
		return nil, err
	}
	c.Store(n)
	return dst, nil
}

// OpenTokenNative verifies or decrypts the envelope env received on channel
// ch in the DATA message whose header is dataHeader, checks its sequence
// like Open, and returns the TokenNative frame (aliasing env). Classify a
// refusal with RefusalCode. An authentic envelope whose content does not
// begin with a tokenizer byte has taken its number and is ErrUnknownFrame.
func (s *Sealer) OpenTokenNative(ch uint32, dataHeader, env []byte) ([]byte, error) {
	if s.key == nil {
		return nil, fmt.Errorf("%w: sealed TokenNative in a session of mode none", security.ErrWrongMode)
	}
	if len(env) < sealedTNHeadLen || env[0] != SealedTNMarker {
		return nil, fmt.Errorf("%w: not a sealed TokenNative envelope", security.ErrMalformed)
	}
	if m := frame.Security(env[1]); m != s.key.Mode() {
		return nil, fmt.Errorf("%w: envelope in mode %s, session mode %s", security.ErrWrongMode, m, s.key.Mode())
	}
	tn, err := s.key.OpenEnvelope(dataHeader, env, sealedTNHeadLen)
	if err != nil {
		return nil, err
	}
	seq := binary.LittleEndian.Uint64(env[2:])
	fch := binary.LittleEndian.Uint32(env[10:])
	if err := s.accept(ch, fch, seq); err != nil {
		return nil, err
	}
	if len(tn) == 0 {
		return nil, fmt.Errorf("%w: empty TokenNative frame", security.ErrMalformed)
	}
	if !IsTokenizerByte(tn[0]) {
		// Authentic, so it took its number; but what it seals is no
		// TokenNative frame.
		return nil, fmt.Errorf("%w: the sealed frame begins with byte 0x%02x, not a tokenizer byte (00 cl100k, 01 o200k, 02 Llama 3)", ErrUnknownFrame, tn[0])
	}
	return tn, nil
}

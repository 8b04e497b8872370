package negotiate

import (
	"errors"
	"fmt"

	"github.com/m2md/m2md/frame"
)

// FrameForm is what the frame of a DATA message is, told by its first byte
// (docs/protocol.md §4). A receiver reads it before anything else: a frame
// that begins with no form's byte is refused as bad_frame, never guessed at.
type FrameForm uint8

const (
	// FormM2M: an M2M v1 frame in the binary shape, first byte 23 ('#').
	FormM2M FrameForm = iota + 1
	// FormTokenNative: a bare TokenNative frame, first byte its tokenizer
	// byte (00 cl100k, 01 o200k, 02 Llama 3).
	FormTokenNative
	// FormSealedTN: a sealed TokenNative envelope (§4.2), first byte 54 ('T').
	FormSealedTN
	// FormCompact: an M2M v1 frame in the compact form of feature compact
	// (§4.5), first byte 43 ('C'). Sealer.Open rebuilds the M2M v1 frame.
	FormCompact
)

// Tokenizer bytes of the binary TokenNative form (wire reference §5); the
// tokennative package's Encoding values, which a test holds equal.
const (
	tokenizerCl100k = 0x00
	tokenizerLlama3 = 0x02
)

// ErrUnknownFrame: the frame of a DATA message (or the one inside a sealed
// envelope) begins with a byte that begins none of the forms DATA carries.
// Its code is bad_frame (RefusalCode).
var ErrUnknownFrame = errors.New("negotiate: unknown frame form")

// IsTokenizerByte reports whether b is the tokenizer byte of a TokenNative
// frame.
func IsTokenizerByte(b byte) bool { return b >= tokenizerCl100k && b <= tokenizerLlama3 }

// ReadFrameForm tells the form of fr, the frame of a DATA message, from its
// first byte. It reads only that byte: whether the rest is a well-formed
// frame of that form is for the frame's own reader. An unknown first byte
// (or an empty frame) is ErrUnknownFrame, with a message naming the valid
// ones.
func ReadFrameForm(fr []byte) (FrameForm, error) {
	if len(fr) == 0 {
		return 0, fmt.Errorf("%w: empty frame", ErrUnknownFrame)
	}
	switch b := fr[0]; {
	case b == '#':
		return FormM2M, nil
	case IsTokenizerByte(b):
		return FormTokenNative, nil
	case b == SealedTNMarker:
		return FormSealedTN, nil
	case b == frame.CompactMarker:
		return FormCompact, nil
	default:
		return 0, fmt.Errorf("%w: the frame begins with byte 0x%02x; DATA carries an M2M v1 frame (first byte 23 '#'), "+
			"a TokenNative frame (first byte its tokenizer: 00 cl100k, 01 o200k, 02 Llama 3), a sealed TokenNative envelope (54 'T') "+
			"or, with feature compact, a compact frame (43 'C')", ErrUnknownFrame, b)
	}
}

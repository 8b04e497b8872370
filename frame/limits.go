package frame

// Limits bounds what a decoder or encoder accepts, so that hostile input is
// refused before memory is spent on it (wire reference §8), and sets how hard
// an encoder compresses. A zero field means the default; a limit above its
// default is clamped to it, so limits can only be tightened.
type Limits struct {
	// MaxMessage bounds an encoded message (either shape). Default 16 MiB.
	MaxMessage int
	// MaxDecompressed bounds the output of any decompression. Default 16 MiB.
	MaxDecompressed int
	// MaxDepth bounds JSON nesting. Default 32.
	MaxDepth int
	// MaxString bounds one JSON string, in bytes as written. Default 10 MiB.
	MaxString int
	// MaxArray bounds the elements of one JSON array. Default 10,000.
	MaxArray int
	// Quality is the Brotli quality, 1–11, of the payloads an encoder
	// compresses. Zero means 5, the wire reference's, whose bytes the
	// reference vectors pin; a value out of range is taken as 5 too.
	// Decoders accept any quality, so it is the sender's choice: quality 1
	// costs about a third of quality 5's CPU on 1 KB chat documents for
	// about 12 % more bytes (docs/benchmarks.md, "The OpenAI edges").
	Quality int
}

// Default limits from the wire reference §8.
const (
	DefaultMaxMessage      = 16 << 20
	DefaultMaxDecompressed = 16 << 20
	DefaultMaxDepth        = 32
	DefaultMaxString       = 10 << 20
	DefaultMaxArray        = 10_000
)

// Effective returns l with zero fields set to their defaults and every field
// clamped to at most its default.
func (l Limits) Effective() Limits {
	return Limits{
		MaxMessage:      clampLimit(l.MaxMessage, DefaultMaxMessage),
		MaxDecompressed: clampLimit(l.MaxDecompressed, DefaultMaxDecompressed),
		MaxDepth:        clampLimit(l.MaxDepth, DefaultMaxDepth),
		MaxString:       clampLimit(l.MaxString, DefaultMaxString),
		MaxArray:        clampLimit(l.MaxArray, DefaultMaxArray),
		Quality:         quality(l.Quality),
	}
}

func clampLimit(v, def int) int {
	if v <= 0 || v > def {
		return def
	}
	return v
}

// quality returns q when it is a Brotli quality an encoder may be asked for,
// else the reference's.
func quality(q int) int {
	if q < 1 || q > 11 {
		return frameQuality
	}
	return q
}

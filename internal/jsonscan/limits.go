package jsonscan

// Limits bounds what a decoder, an encoder or a scan accepts, so that
// hostile input is refused before memory is spent on it (wire reference §8).
// It is the one limits type of the module: the frame package exports it as
// frame.Limits, and every package passes it down unchanged, each reading the
// fields that apply to it.
//
// A zero field means its default; a limit above its default is clamped to
// it, so limits can only be tightened (Effective). Quality is not a limit
// but travels with them: it is how hard the frame encoder compresses.
type Limits struct {
	// MaxMessage bounds an encoded message (either frame shape). Default
	// 16 MiB.
	MaxMessage int
	// MaxDecompressed bounds the output of any decompression. Default
	// 16 MiB.
	MaxDecompressed int
	// MaxDepth bounds the nesting of JSON arrays and objects; a scalar
	// document has depth 0, "[]" depth 1. Default 32.
	MaxDepth int
	// MaxString bounds the bytes of one JSON string or key as written,
	// escapes included, quotes excluded. Default 10 MiB.
	MaxString int
	// MaxArray bounds the elements of one JSON array. Default 10,000.
	MaxArray int
	// MaxMembers bounds the members of one JSON object where a document is
	// read into a tree (Parse: control messages, the legacy T1 codec).
	// Zero or negative: no bound but the input's size.
	MaxMembers int
	// Quality is the Brotli quality, 1–11, of the payloads the frame
	// encoder compresses. Zero or out of range means DefaultQuality.
	Quality int
	// CompressFrom is the length in bytes from which the frame encoder
	// compresses a document; shorter ones go stored. Zero means
	// DefaultCompressFrom, the wire reference's rule; negative, never.
	CompressFrom int
}

// Default limits from the wire reference §8.
const (
	DefaultMaxMessage      = 16 << 20
	DefaultMaxDecompressed = 16 << 20
	DefaultMaxDepth        = 32
	DefaultMaxString       = 10 << 20
	DefaultMaxArray        = 10_000

	// DefaultQuality is the wire reference's Brotli quality for frame
	// payloads (§2.4).
	DefaultQuality = 5

	// DefaultCompressFrom is the wire reference's: a document of 100
	// bytes or more goes compressed (§3.9).
	DefaultCompressFrom = 100
)

// Effective returns l with zero fields set to their defaults and every field
// clamped to at most its default, Quality set to DefaultQuality when it is
// not one, and a negative CompressFrom as -1. MaxMembers, which has no
// default, is returned as given.
func (l Limits) Effective() Limits {
	return Limits{
		MaxMessage:      clampLimit(l.MaxMessage, DefaultMaxMessage),
		MaxDecompressed: clampLimit(l.MaxDecompressed, DefaultMaxDecompressed),
		MaxDepth:        clampLimit(l.MaxDepth, DefaultMaxDepth),
		MaxString:       clampLimit(l.MaxString, DefaultMaxString),
		MaxArray:        clampLimit(l.MaxArray, DefaultMaxArray),
		MaxMembers:      l.MaxMembers,
		Quality:         quality(l.Quality),
		CompressFrom:    compressFrom(l.CompressFrom),
	}
}

// quality returns q when it is a Brotli quality an encoder may be asked for,
// else the reference's.
func quality(q int) int {
	if q < 1 || q > 11 {
		return DefaultQuality
	}
	return q
}

func compressFrom(n int) int {
	switch {
	case n == 0:
		return DefaultCompressFrom
	case n < 0:
		return -1
	}
	return n
}

func clampLimit(v, def int) int {
	if v <= 0 || v > def {
		return def
	}
	return v
}

// effective is Effective with "no bound" on members written as -1, the
// value the scanner compares against.
func (l Limits) effective() Limits {
	l = l.Effective()
	if l.MaxMembers <= 0 {
		l.MaxMembers = -1
	}
	return l
}

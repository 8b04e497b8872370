package frame

import "github.com/m2md/m2md/internal/jsonscan"

// Limits bounds what a decoder or encoder accepts, so that hostile input is
// refused before memory is spent on it (wire reference §8), and sets how hard
// an encoder compresses. A zero field means the default; a limit above its
// default is clamped to it, so limits can only be tightened
// (Limits.Effective). The fields:
//
//	MaxMessage       an encoded message, either shape; default 16 MiB
//	MaxDecompressed  the output of any decompression; default 16 MiB
//	MaxDepth         the nesting of JSON arrays and objects; default 32
//	MaxString        one JSON string or key, in bytes as written; default 10 MiB
//	MaxArray         the elements of one JSON array; default 10,000
//	MaxMembers       the members of one JSON object, where a document is read
//	                 whole into a tree (the legacy T1 codec); default: no bound
//	Quality          the Brotli quality, 1–11, of the payloads an encoder
//	                 compresses; zero or out of range: 5, the wire reference's
//	CompressFrom     the document length in bytes from which an encoder
//	                 compresses; shorter documents go stored; zero: 100, the
//	                 wire reference's; negative: never
//
// Decoders accept any Brotli quality, and stored payloads of any length, so
// both are the sender's choice: quality 1 costs about a third of quality 5's
// CPU on 1 KB chat documents for about 12 % more bytes, and a stored payload
// no compression at all for about twice the bytes (docs/benchmarks.md, "The
// OpenAI edges"); the defaults give the bytes the reference vectors pin.
//
// Every package of the module takes this one type, so a caller sets its
// limits once and passes them on.
type Limits = jsonscan.Limits

// Default limits from the wire reference §8.
const (
	DefaultMaxMessage      = jsonscan.DefaultMaxMessage
	DefaultMaxDecompressed = jsonscan.DefaultMaxDecompressed
	DefaultMaxDepth        = jsonscan.DefaultMaxDepth
	DefaultMaxString       = jsonscan.DefaultMaxString
	DefaultMaxArray        = jsonscan.DefaultMaxArray
)

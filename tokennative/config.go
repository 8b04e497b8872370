package tokennative

// Default limits (wire reference §8).
const (
	// DefaultMaxMessage bounds an encoded message, in either form.
	DefaultMaxMessage = 16 << 20
	// DefaultMaxDecoded bounds the text a message decodes to.
	DefaultMaxDecoded = 16 << 20
)

// Config configures a Codec. The zero value is a working default: cl100k and
// o200k available, Llama 3 unavailable, 16 MiB limits.
type Config struct {
	// Llama3Path locates the Llama 3 vocabulary; empty leaves Llama 3
	// unavailable (ErrUnavailable, and Available does not list it). It names
	// either a directory holding encoder.json (GPT-2 layout; a vocab.bpe beside
	// it is checked against it) or tokenizer.model (tiktoken rank file), or one
	// of those files. The vocabulary is loaded on first use, once per process
	// and path; a bad path is reported then (call Codec.Tokenizer(Llama3) at
	// startup to find out early), and retried at most every 10 seconds.
	Llama3Path string

	// MaxMessage bounds an encoded message (text or binary form), checked
	// before decoding starts and after encoding. Zero means DefaultMaxMessage;
	// larger values are clamped to it, so limits can only be tightened.
	MaxMessage int

	// MaxDecoded bounds decoded text, checked while tokens are expanded (a
	// short token list can expand many times), and the text given to encode
	// (a peer with the same limit could not decode more). Zero means
	// DefaultMaxDecoded; larger values are clamped to it.
	MaxDecoded int
}

func clampLimit(v, def int) int {
	if v <= 0 || v > def {
		return def
	}
	return v
}

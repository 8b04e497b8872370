package codec

import "fmt"

// Algorithm names a wire form.
type Algorithm uint8

const (
	// None passes content through unchanged.
	None Algorithm = iota
	// M2M is the M2M v1 frame ("#M2M|1|"), Brotli q5 from 100 bytes on.
	M2M
	// TokenNative carries BPE token ids as varints ("#TK|").
	TokenNative
	// Brotli is the "#M2M[v3.0]|DATA:" Brotli q11 text form.
	Brotli
	// T1 is the legacy key-abbreviation form ("#T1|"); lossy by design.
	T1
	// Zlib is the legacy "#M2M[v2.0]|DATA:" form.
	Zlib
	// Dictionary is the legacy "#M2M|" dictionary form (ASCII only).
	Dictionary
)

var algorithmNames = [...]string{None: "none", M2M: "m2m", TokenNative: "tokennative", Brotli: "brotli", T1: "t1", Zlib: "zlib", Dictionary: "dictionary"}

// String returns the algorithm's name as used on the command line and, for
// none/m2m/tokennative/brotli, in the Rust reference's JSON.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", a)
}

// ParseAlgorithm reads an algorithm name.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if n == s {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want none, m2m, tokennative, brotli, t1, zlib or dictionary)", ErrUnknownAlgorithm, s)
}

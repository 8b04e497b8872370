package codec

import "errors"

var (
	// ErrUnknownAlgorithm: an algorithm name this package does not know.
	ErrUnknownAlgorithm = errors.New("codec: unknown algorithm")
	// ErrKeyRequired: the frame is protected (HMAC or AEAD) and no key was
	// given. An HMAC frame is not decoded unverified.
	ErrKeyRequired = errors.New("codec: protected frame needs a key")
	// ErrUnsupported: an option combination the wire forms do not have
	// (security on a form other than M2M, a binary shape of a text-only form).
	ErrUnsupported = errors.New("codec: unsupported option")
	// ErrMalformed: a known prefix whose body is not a valid frame.
	ErrMalformed = errors.New("codec: malformed")
)

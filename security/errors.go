package security

import "errors"

// Sentinel errors. Every error this package returns wraps one of them (some
// wrap two, e.g. an ID error wraps ErrInvalidID and the specific reason), so
// callers decide with errors.Is and log the wrapped message, which names the
// offending length or byte but never key material.
var (
	// ErrTooShort: the input ends before a field the operation needs.
	ErrTooShort = errors.New("security: input too short")
	// ErrMalformed: the input is long enough but its structure is wrong
	// (prefix, header_len, payload_len, a field of the wrong size).
	ErrMalformed = errors.New("security: malformed input")
	// ErrVerificationFailed: an HMAC tag or a HELLO proof did not verify.
	ErrVerificationFailed = errors.New("security: verification failed")
	// ErrDecryptionFailed: ChaCha20-Poly1305 refused the ciphertext (wrong
	// key, or anything in the AAD, nonce, ciphertext or tag changed).
	ErrDecryptionFailed = errors.New("security: decryption failed")
	// ErrInvalidKey: key material of the wrong size, or empty.
	ErrInvalidKey = errors.New("security: invalid key")
	// ErrWrongMode: the frame's security byte is not the mode the caller
	// requires (a FrameKey opens and protects only frames of its own mode,
	// and only a plain frame, security byte 00, can be protected).
	ErrWrongMode = errors.New("security: wrong security mode")
	// ErrUnknownMode: a security byte other than 00, 01 or 02.
	ErrUnknownMode = errors.New("security: unknown security mode")
	// ErrBufferOverlap: dst overlaps the input other than at the very start
	// (dst = input[:0] is the supported way to work in place).
	ErrBufferOverlap = errors.New("security: dst overlaps input inexactly")
	// ErrRandom: the nonce source failed.
	ErrRandom = errors.New("security: random source failed")

	// ErrDerivation: an HKDF request outside 1..8160 bytes of output.
	ErrDerivation = errors.New("security: key derivation failed")
	// ErrInvalidPublicKey: an X25519 public key of the wrong length, or
	// one that yields the all-zero (low-order) shared secret.
	ErrInvalidPublicKey = errors.New("security: invalid public key")
	// ErrNonceExhausted: an AEAD FrameKey has sealed 2^64-1 frames; its
	// counter nonces would repeat. Open a new session (new keys).
	ErrNonceExhausted = errors.New("security: AEAD nonce counter exhausted; start a new session")

	// ErrInvalidID: an org, agent or session id breaks the ID rules
	// (ValidateID). Always wrapped together with one of ErrIDEmpty,
	// ErrIDTooLong or ErrIDInvalidChar.
	ErrInvalidID     = errors.New("security: invalid id")
	ErrIDEmpty       = errors.New("id is empty")
	ErrIDTooLong     = errors.New("id is too long")
	ErrIDInvalidChar = errors.New("id has a character outside [A-Za-z0-9_-]")
)

// Package security protects M2M v1 frames and derives the keys that do it.
//
// It has four parts, each in its own file:
//
//   - Frame protection (framekey.go, protect.go; wire reference §4.1–4.3).
//     A plain frame (security byte 00, what the frame encoder writes) is
//     turned into an HMAC-SHA256 frame (byte 01, 32-byte tag over
//     everything after the "#M2M|1|" prefix, appended) or a
//     ChaCha20-Poly1305 frame (byte 02, the headers as associated data,
//     payload_len ‖ crc32 ‖ payload encrypted under a fresh random 12-byte
//     nonce placed right after the headers), and back. Open returns the
//     plain frame, ready for the frame decoder.
//   - The agent key of the Rust reference's HKDF-SHA256 hierarchy (hkdf.go;
//     §4.4), derived from an org master secret: the key an agent proves in
//     HELLO. The hierarchy's other keys and the keyring are not used by the
//     protocol and are not carried.
//   - X25519 key agreement on crypto/ecdh (x25519.go; §4.6).
//   - The m2md session key schedule (session.go; docs/protocol.md §5): the
//     handshake transcript hash, the two per-direction frame keys, the
//     ACCEPT's key confirmation, and the agent's HELLO proof over the whole
//     HELLO.
//
// # Per-frame use
//
// A session derives its two frame keys once (DeriveFrameKeys) and
// prepares one FrameKey per direction (NewFrameKey). The FrameKey holds the
// ready cipher or MAC state, so protecting or opening a frame allocates
// nothing. Both operations append to dst like crypto/cipher.AEAD, and both
// work in place with dst = input[:0]: the daemon's forwarding step
//
//	plain, err := fromSender.Open(buf[:0], buf)      // verify/decrypt where it lies
//	binary.LittleEndian.PutUint64(plain[frame.OffSequence:], seq)
//	out, err := toReceiver.Protect(plain[:0], plain) // needs AEADOverhead spare capacity
//
// allocates nothing and copies nothing, except that AEAD mode moves the
// payload section 12 bytes to make or close the nonce's room. The reserved header bytes
// that carry m2md's sequence number and channel id are covered by the HMAC
// tag and by the AEAD associated data, so they cannot be changed in
// transit.
//
// A FrameKey accepts only frames of its own mode. The package-level Open
// dispatches on the security byte as the Rust decode_secure does and
// reports the mode it found; since that byte is the sender's claim, a
// frame stripped of its protection opens there as mode none: callers that
// expect protection use a FrameKey (or compare the mode).
//
// This package is stricter than the Rust decoder in three ways, none of
// which refuses a frame the Rust encoder writes: a security byte other
// than 00/01/02 is an error (Rust treats it as 00); payload_len must match
// the payload exactly in every mode (Rust demands it for AEAD only); and
// an X25519 exchange that yields the all-zero secret is refused. A Rust
// peer must be built with its "crypto" feature, without which it uses
// non-interoperable stand-ins for every primitive here.
//
// # Keys in memory
//
// Key (32 bytes) and Secret (any length) print as "[redacted]" through
// fmt, encoding/json, encoding.TextMarshaler and log/slog, and so do the
// types that hold keys (FrameKey, KeyPair). Key material this package owns is cleared with clear() when
// it is no longer needed, and the types that keep keys have Wipe methods.
// Go cannot promise more than that: the runtime moves a goroutine's stack
// when it grows without zeroing the old one, append leaves a grown slice's
// old array behind, values passed by value (Key is an array) are copies,
// strings (ids) cannot be cleared, and the standard library's and
// x/crypto's internal key schedules (the HMAC pads, the ChaCha20 key, the
// X25519 scalar inside crypto/ecdh) offer no way to wipe them: they are
// released to the garbage collector with their owner.
//
// # Errors
//
// Every error wraps a sentinel (ErrVerificationFailed, ErrDecryptionFailed,
// ErrTooShort, ErrMalformed, ErrInvalidKey, ErrWrongMode, …) for
// errors.Is, with a message that names lengths and offsets and never key
// bytes. Malformed input never panics.
package security

package security

import "github.com/m2md/m2md/frame"

// Protect appends plain, protected in mode with key, to dst: a one-shot
// convenience that prepares the primitive on every call. Sessions create
// a FrameKey once per direction instead (no per-frame allocation); the
// rules for plain, dst and in-place use are those of FrameKey.Protect.
func Protect(dst, plain []byte, mode frame.Security, key []byte) ([]byte, error) {
	k, err := NewFrameKey(mode, key)
	if err != nil {
		return nil, err
	}
	return k.Protect(dst, plain)
}

// Open dispatches on the frame's security byte like the Rust
// decode_secure (§4.3): it verifies (HMAC) or decrypts (AEAD) with key and
// appends the plain frame to dst, or copies a plain frame unchanged. It
// returns the mode the frame was in.
//
// The mode is the sender's claim: a frame stripped of its protection opens
// here as SecurityNone without error. A caller with an expected mode must
// compare it, or use a FrameKey, which refuses every other mode.
func Open(dst, protected []byte, key []byte) (plain []byte, mode frame.Security, err error) {
	mode, err = Mode(protected)
	if err != nil {
		return nil, mode, err
	}
	k, err := NewFrameKey(mode, key)
	if err != nil {
		return nil, mode, err
	}
	plain, err = k.Open(dst, protected)
	return plain, mode, err
}

package security

import "fmt"

// MaxIDLen bounds org, agent and session ids (wire reference §4.4).
const MaxIDLen = 128

// ValidateID checks an org, agent or session id: 1 to MaxIDLen bytes of
// [A-Za-z0-9_-]. These ids become parts of HKDF info paths separated by
// '/', ':' and '|', so nothing else may appear in them: a freer alphabet
// would let two different (org, agent) pairs share a path and a key.
//
// The error wraps ErrInvalidID and one of ErrIDEmpty, ErrIDTooLong,
// ErrIDInvalidChar.
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: %w", ErrInvalidID, ErrIDEmpty)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: %w: %d bytes, at most %d", ErrInvalidID, ErrIDTooLong, len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !IDByte(id[i]) {
			return fmt.Errorf("%w: %w: byte %#02x at offset %d", ErrInvalidID, ErrIDInvalidChar, id[i], i)
		}
	}
	return nil
}

// IDByte reports whether c may appear in an id: [A-Za-z0-9_-]. The DATA
// header's peer uses the same alphabet (docs/protocol.md §4).
func IDByte(c byte) bool { return idBytes[c] }

// idBytes is a table so that parsing a DATA header's peer costs one load a byte.
var idBytes = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	t['_'], t['-'] = true, true
	return t
}()

// validateIDs validates several ids, naming the first bad one's role.
func validateIDs(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := ValidateID(pairs[i+1]); err != nil {
			return fmt.Errorf("%s: %w", pairs[i], err)
		}
	}
	return nil
}

package negotiate

import (
	"crypto/rand"
	"io"
)

// Session ids: "sess_" and 20 characters of [A-Za-z0-9] (about 119 bits).
const (
	sessionIDPrefix  = "sess_"
	sessionIDRandLen = 20
	// sessionIDLen is the length of every session id.
	sessionIDLen = len(sessionIDPrefix) + sessionIDRandLen
)

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomSessionID returns a fresh session id drawn from crypto/rand.
func randomSessionID() string {
	id, err := newSessionID(rand.Reader)
	if err != nil {
		// crypto/rand.Reader does not fail (it crashes the program first).
		panic(err)
	}
	return id
}

// newSessionID draws with rejection sampling: bytes >= 248 (= 4·62) are
// discarded so that every character is equally likely (no modulo bias).
func newSessionID(r io.Reader) (string, error) {
	out := make([]byte, len(sessionIDPrefix), sessionIDLen)
	copy(out, sessionIDPrefix)
	var buf [32]byte
	for len(out) < sessionIDLen {
		if _, err := io.ReadFull(r, buf[:]); err != nil {
			return "", err
		}
		for _, b := range buf {
			if int(b) >= 4*len(alnum) {
				continue
			}
			out = append(out, alnum[int(b)%len(alnum)])
			if len(out) == sessionIDLen {
				break
			}
		}
	}
	return string(out), nil
}

// ValidSessionID reports whether s has the shape of an m2md session id.
func ValidSessionID(s string) bool {
	if len(s) != sessionIDLen || s[:len(sessionIDPrefix)] != sessionIDPrefix {
		return false
	}
	for i := len(sessionIDPrefix); i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

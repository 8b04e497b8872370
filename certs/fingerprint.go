package certs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrBadFingerprint reports a pin that is not a SHA-256 fingerprint.
var ErrBadFingerprint = errors.New("certs: bad SHA-256 fingerprint")

// Fingerprint returns the SHA-256 of a certificate's DER bytes as 64
// lowercase hex digits: the form PinSHA256 accepts and the daemon prints.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// FormatFingerprint renders a hex fingerprint the way browsers and openssl
// show it: uppercase byte pairs separated by colons ("AB:CD:…"). Input that
// is not a fingerprint is returned unchanged.
func FormatFingerprint(fp string) string {
	sum, err := ParseFingerprint(fp)
	if err != nil {
		return fp
	}
	const hexUpper = "0123456789ABCDEF"
	out := make([]byte, 0, len(sum)*3-1)
	for i, b := range sum {
		if i > 0 {
			out = append(out, ':')
		}
		out = append(out, hexUpper[b>>4], hexUpper[b&0x0f])
	}
	return string(out)
}

// ParseFingerprint reads a SHA-256 fingerprint written as 64 hex digits,
// in either case, with or without colons between byte pairs (so both
// Fingerprint's and FormatFingerprint's output are accepted).
func ParseFingerprint(s string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	s = strings.TrimSpace(s)
	var digits string
	switch len(s) {
	case 2 * sha256.Size:
		digits = s
	case 3*sha256.Size - 1:
		// Colons must sit exactly between the pairs; anything else is a typo
		// worth reporting rather than guessing around.
		var b strings.Builder
		b.Grow(2 * sha256.Size)
		for i := 0; i < len(s); i++ {
			if i%3 == 2 {
				if s[i] != ':' {
					return sum, fmt.Errorf("%w: expected ':' at position %d", ErrBadFingerprint, i)
				}
				continue
			}
			b.WriteByte(s[i])
		}
		digits = b.String()
	default:
		return sum, fmt.Errorf("%w: %d characters, want 64 hex digits (or 95 with colons)", ErrBadFingerprint, len(s))
	}
	if _, err := hex.Decode(sum[:], []byte(digits)); err != nil {
		return sum, fmt.Errorf("%w: %v", ErrBadFingerprint, err)
	}
	return sum, nil
}

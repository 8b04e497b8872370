package security

import (
	"fmt"
	"io"
	"log/slog"
)

// redacted is what every key type prints, whatever the verb.
const redacted = "[redacted]"

// Key is a 32-byte symmetric key: every HKDF output of this package, an
// X25519 shared secret, a per-direction frame key.
//
// It is an array so that it can live on the stack and be assigned to a
// [32]byte; pass k[:] where a []byte is wanted. Printing it in any form
// (fmt verbs, JSON, text, slog) yields "[redacted]": a test that needs the
// bytes calls hex.EncodeToString(k[:]) deliberately.
type Key [32]byte

// Wipe overwrites the key with zeros. Copies made by assigning or passing
// the array by value are separate arrays and are not affected; see the
// package documentation for what Go can and cannot guarantee.
func (k *Key) Wipe() { clear(k[:]) }

// IsZero reports whether the key is all zeros (unset or wiped), in time
// independent of the key's value.
func (k *Key) IsZero() bool {
	var acc byte
	for _, b := range k {
		acc |= b
	}
	return acc == 0
}

// String, GoString, Format, MarshalText and LogValue keep the key out of
// logs, error messages and JSON, whichever printing path a caller takes.
func (Key) String() string               { return redacted }
func (Key) GoString() string             { return "security.Key(" + redacted + ")" }
func (Key) Format(f fmt.State, _ rune)   { io.WriteString(f, redacted) }
func (Key) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (Key) LogValue() slog.Value         { return slog.StringValue(redacted) }

// Secret is key material of any length (an org master secret read from
// configuration, a keyring entry, a long HKDF output). It prints as
// "[redacted]" like Key.
type Secret []byte

// Wipe overwrites the secret's bytes with zeros.
func (s Secret) Wipe() { clear(s) }

func (Secret) String() string               { return redacted }
func (Secret) GoString() string             { return "security.Secret(" + redacted + ")" }
func (Secret) Format(f fmt.State, _ rune)   { io.WriteString(f, redacted) }
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }

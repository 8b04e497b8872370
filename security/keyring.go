package security

import (
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Keyring holds named keys in memory (Rust Keyring, wire reference §4.5).
// The first key added becomes the default; removing the default leaves the
// ring without one until SetDefault. Nothing about it appears on the wire.
// The zero value is an empty keyring ready to use; it is safe for
// concurrent use.
type Keyring struct {
	mu   sync.RWMutex
	keys map[string][]byte
	def  string // "" = no default
}

// Add stores a copy of key under id (a valid ID), replacing and wiping an
// earlier key of that id. The key must not be empty.
func (r *Keyring) Add(id string, key []byte) error {
	if err := validateIDs("key id", id); err != nil {
		return err
	}
	if len(key) == 0 {
		return fmt.Errorf("%w: empty key for id %q", ErrInvalidKey, id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = make(map[string][]byte)
	}
	if old, ok := r.keys[id]; ok {
		clear(old)
	}
	r.keys[id] = append([]byte(nil), key...)
	if r.def == "" {
		r.def = id
	}
	return nil
}

// Remove wipes and removes the key under id and reports whether there was
// one. Removing the default key leaves the ring without a default.
func (r *Keyring) Remove(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.keys[id]
	if !ok {
		return false
	}
	clear(k)
	delete(r.keys, id)
	if r.def == id {
		r.def = ""
	}
	return true
}

// SetDefault makes the key under id the default.
func (r *Keyring) SetDefault(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.keys[id]; !ok {
		return fmt.Errorf("%w: no key with id %q", ErrKeyNotFound, id)
	}
	r.def = id
	return nil
}

// Default returns the default key's id, if there is one.
func (r *Keyring) Default() (id string, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.def, r.def != ""
}

// Len returns the number of keys.
func (r *Keyring) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.keys)
}

// Get returns a copy of the key under id; the caller should Wipe it.
func (r *Keyring) Get(id string) (Secret, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	k, ok := r.keys[id]
	if !ok {
		return nil, false
	}
	return append(Secret(nil), k...), true
}

// SessionKey derives a session key from the default key: HKDF-SHA256, no
// salt, info "m2m-v1|{context}|{sid}" (Rust Keyring::derive_session_key).
// context must be non-empty and free of '|' (it would make two
// (context, sid) pairs share a path); sid must be a valid ID.
func (r *Keyring) SessionKey(context, sid string) (Key, error) {
	if context == "" || strings.IndexByte(context, '|') >= 0 {
		return Key{}, fmt.Errorf("%w: keyring context must be non-empty and without '|'", ErrMalformed)
	}
	if err := validateIDs("session id", sid); err != nil {
		return Key{}, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.def == "" {
		return Key{}, fmt.Errorf("%w: keyring has no default key", ErrKeyNotFound)
	}
	return derive32(r.keys[r.def], "m2m-v1|"+context+"|"+sid)
}

// Wipe wipes and removes every key.
func (r *Keyring) Wipe() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, k := range r.keys {
		clear(k)
		delete(r.keys, id)
	}
	r.def = ""
}

func (r *Keyring) String() string {
	return fmt.Sprintf("security.Keyring(%d keys, %s)", r.Len(), redacted)
}
func (r *Keyring) Format(f fmt.State, _ rune) { io.WriteString(f, r.String()) }

// ParseHexKey decodes key material written in hex (upper or lower case,
// even length, non-empty), as configuration files carry it (Rust
// KeyMaterial::from_hex).
func ParseHexKey(s string) (Secret, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty hex key", ErrInvalidKey)
	}
	k, err := hex.DecodeString(s)
	if err != nil {
		// hex's error quotes the offending byte, which is part of the secret.
		clear(k)
		return nil, fmt.Errorf("%w: key is not an even-length hex string", ErrInvalidKey)
	}
	return Secret(k), nil
}

package security_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/security"
)

// Both ends of a session agree on a shared secret with X25519, derive the
// two frame keys from it and the handshake transcript, and prepare one
// FrameKey per direction. The client seals a frame; the daemon opens it.
func Example() {
	client, err := security.GenerateKeyPair()
	if err != nil {
		panic(err)
	}
	daemon, err := security.GenerateKeyPair()
	if err != nil {
		panic(err)
	}
	cpub, dpub := client.PublicKey(), daemon.PublicKey()
	clientShared, err := client.SharedSecret(dpub[:])
	if err != nil {
		panic(err)
	}
	daemonShared, err := daemon.SharedSecret(cpub[:])
	if err != nil {
		panic(err)
	}

	// The transcript hashes the HELLO and ACCEPT as sent; no agent key here
	// (a daemon without org secrets).
	transcript := security.Transcript([]byte(`{"hello":1}`), []byte(`{"accept":1}`))
	c2s, _, _, err := security.DeriveFrameKeys(clientShared[:], nil, transcript)
	if err != nil {
		panic(err)
	}
	c2sAtDaemon, _, _, err := security.DeriveFrameKeys(daemonShared[:], nil, transcript)
	if err != nil {
		panic(err)
	}
	send, err := security.NewFrameKey(frame.SecurityAEAD, c2s[:])
	if err != nil {
		panic(err)
	}
	recv, err := security.NewFrameKey(frame.SecurityAEAD, c2sAtDaemon[:])
	if err != nil {
		panic(err)
	}

	plain, err := frame.AppendEncode(nil, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`), frame.Limits{})
	if err != nil {
		panic(err)
	}
	sealed, err := send.Protect(nil, plain)
	if err != nil {
		panic(err)
	}
	opened, err := recv.Open(nil, sealed)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(sealed)-len(plain) == security.Overhead(frame.SecurityAEAD), bytes.Equal(opened, plain))

	// A frame stripped of its protection is refused, not accepted as plain.
	_, err = recv.Open(nil, plain)
	fmt.Println(errors.Is(err, security.ErrWrongMode))
	// Output:
	// true true
	// true
}

// An org's master secret yields one key per agent; the agent proves it in
// HELLO, and the daemon, which holds the same secret, checks the proof.
func ExampleAgentKey() {
	master := []byte("an org master secret of 32 bytes")
	key, err := security.AgentKey(master, "acme", "alice")
	if err != nil {
		panic(err)
	}
	defer key.Wipe()
	fmt.Println(key) // a Key never prints its bytes

	_, err = security.AgentKey(master, "acme", "alice/bob")
	fmt.Println(errors.Is(err, security.ErrInvalidID))
	// Output:
	// [redacted]
	// true
}

// Package negotiate implements the m2md session protocol
// (docs/protocol.md) without any networking: the bytes of its messages, the
// handshake that turns a HELLO into a session, and the timers and states
// that a connection goes through. The transport packages move the bytes;
// the daemon and the client library drive this package with them.
//
// # Messages
//
// Every message starts with a Kind byte. CONTROL messages carry a JSON
// envelope: ParseControl reads one strictly (size, depth, exact member
// names, required members, UTF-8) into a ControlMessage, and AppendControl,
// AppendPing, AppendPong, AppendClose and AppendReject write them in the
// Rust reference's compact form. DATA messages carry a small binary header
// before a frame: AppendDataHeader and AppendData write it, ParseData reads
// it without allocating.
//
// # Handshake
//
// The client builds its HELLO with NewHello and finishes with
// ClientHandshake.Accept on the daemon's reply. The daemon owns one Server
// (policy, org secrets, used-proof cache) and calls Server.Accept on each
// connection's first message, which negotiates (version, algorithms,
// encoding, max payload, security mode, authentication, capacity) and
// returns the ACCEPT or REJECT to send. Both ends get a Session with the
// same id, parameters, transcript hash and two 32-byte frame keys, one per
// direction, derived from an ephemeral X25519 exchange (and the agent key
// when the daemon authenticates agents). Failures are *RejectError values,
// matched with errors.Is against ErrVersionMismatch and the other codes.
//
// # Lifecycle
//
// A Machine per connection tracks the state (Initial, HelloSent,
// Established, Closing, Closed), says which messages may be sent or
// received, and runs the HELLO deadline, the keepalive (PING after silence,
// three missed PONGs or the session timeout close with TIMEOUT) and the
// CLOSE acknowledgement deadline. It is pure logic driven by the caller's
// time.Time values: call Tick at Deadline and do what the returned Action
// says.
//
// # Replay protection
//
// A Sealer owns one direction's frame key and per-channel sequence numbers
// (Session.Sealers gives both): Seal numbers a frame, then protects it;
// Open opens a frame, then checks its number. A frame that fails takes or
// advances no number: one forged frame cannot desynchronize a channel. A
// frame out of order is refused with ErrReplay.
package negotiate

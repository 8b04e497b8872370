// Package daemon is the m2md routing daemon: it accepts sessions over QUIC
// and binary WebSocket, negotiates each one (negotiate), and routes DATA
// frames between the agents that hold them open (router), reading only frame
// headers (frame.ReadHeader) and never decompressing a payload.
//
// Per session, one goroutine reads and routes. Writing happens on demand
// (writer.go): whoever queues a message or sees a timer fire kicks the
// session, and one writer goroutine at a time drains its bounded control
// and data queues (control first), protects each frame with the session's
// keys and a fresh sequence number, hands what it took to the transport as
// one batch, runs the keepalive and CLOSE timers, and exits when there is no
// more work, so an idle session holds no writer goroutine. A full queue
// never blocks the reader of another session: the message is refused and
// its sender told why (docs/protocol.md §4, docs/operations.md).
package daemon

// Package daemon is the m2md routing daemon: it accepts sessions over QUIC
// and binary WebSocket, negotiates each one (negotiate), and routes DATA
// frames between the agents that hold them open (router), reading only frame
// headers (frame.ReadHeader) and never decompressing a payload.
//
// Per session, one goroutine reads and routes, and one goroutine writes:
// it drains a bounded send queue, protects each frame with the session's
// keys and a fresh sequence number, and runs the keepalive timers. A full
// queue never blocks the reader of another session: the message is refused
// and its sender told why (docs/protocol.md §4, docs/operations.md).
package daemon

// Package integration holds end-to-end tests: they start the real m2md
// daemon on loopback ports and talk to it over real QUIC and WebSocket
// connections, with the client library and with a raw protocol agent that
// can misbehave on purpose (tampered, replayed, wrong-mode and garbage frames).
package integration

//go:build race

package main

// raceEnabled: the race detector slows this binary, and so the m2md
// processes the tests start from it, about tenfold in QUIC and TLS
// handshakes; the restart test runs fewer agents and allows for it.
const raceEnabled = true

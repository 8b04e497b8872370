//go:build race

package integration

// raceEnabled scales the load tests down under the race detector, which
// slows the QUIC and TLS stacks about tenfold.
const raceEnabled = true

// Package certs provides the TLS material m2md needs: a self-signed
// development certificate that the daemon makes on first run and reuses
// afterwards, loading of real certificates, SHA-256 fingerprints for
// pinning, and client-side tls.Configs that verify the daemon against a CA
// file or a pinned leaf fingerprint.
//
// A typical zero-configuration setup: the daemon calls EnsureDevCert (in
// DefaultDevDir, the same folder for every command of one user) and
// prints FormatFingerprint(fp); an agent connects with
// ClientTLSConfig(ClientOptions{PinSHA256: fp}). Production setups use Load
// on the server and ClientOptions.CAFile (or the system roots) on clients.
//
// The package never sets NextProtos: the transport that uses a config sets
// its own ALPN (QUIC "m2m/1", WebSocket "http/1.1").
package certs

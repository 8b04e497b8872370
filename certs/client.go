package certs

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ClientOptions says how a client decides to trust the daemon. The zero
// value verifies against the system roots, like any TLS client.
type ClientOptions struct {
	// CAFile is a PEM file of root certificates to verify the daemon's
	// chain against instead of the system roots.
	CAFile string
	// PinSHA256 is the SHA-256 fingerprint of the daemon's leaf certificate
	// (hex, colons optional, see ParseFingerprint). When set, the leaf must
	// match it; the system roots are not consulted, and unless CAFile is
	// also set, neither the chain nor the host name is checked: the pin
	// alone identifies the daemon, which is what a self-signed development
	// certificate needs. With CAFile too, both must pass.
	PinSHA256 string
	// InsecureSkipVerify accepts any certificate. It is a development
	// option: the connection is encrypted but anyone on the path can
	// impersonate the daemon. Prefer PinSHA256 with the fingerprint the
	// daemon prints at start-up. It cannot be combined with CAFile or
	// PinSHA256.
	InsecureSkipVerify bool
	// ServerName is the name sent in SNI and checked against the
	// certificate. Empty means the host being dialled (Go fills it in from
	// the address when the config is used with tls.Dial / the transports).
	ServerName string
}

// ErrPinMismatch reports a peer whose leaf certificate is not the pinned one.
var ErrPinMismatch = errors.New("certs: server certificate does not match the pinned SHA-256 fingerprint")

// ClientTLSConfig returns a client configuration implementing opts. The
// caller sets NextProtos (and ServerName if it was left empty and the dial
// function does not fill it in).
func ClientTLSConfig(opts ClientOptions) (*tls.Config, error) {
	cfg := &tls.Config{
		ServerName: opts.ServerName,
		MinVersion: tls.VersionTLS12,
	}
	if opts.InsecureSkipVerify {
		if opts.CAFile != "" || opts.PinSHA256 != "" {
			return nil, errors.New("certs: InsecureSkipVerify cannot be combined with CAFile or PinSHA256")
		}
		cfg.InsecureSkipVerify = true
		return cfg, nil
	}

	var roots *x509.CertPool
	if opts.CAFile != "" {
		pemBytes, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("certs: read CA file: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("certs: CA file %s holds no PEM certificate", opts.CAFile)
		}
	}

	cfg.RootCAs = roots // nil: system roots
	if opts.PinSHA256 == "" {
		return cfg, nil
	}

	pin, err := ParseFingerprint(opts.PinSHA256)
	if err != nil {
		return nil, err
	}
	if roots == nil {
		// Pin alone: the standard verifier would consult the system roots
		// and reject a self-signed leaf, so it is switched off and the pin
		// is the whole check. With a CA file the standard verifier stays on
		// (it checks the chain and the host name the dialler filled in,
		// IP addresses included) and the pin is checked on top.
		cfg.InsecureSkipVerify = true
	}
	// VerifyConnection, unlike VerifyPeerCertificate, also runs on resumed
	// sessions.
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("certs: server sent no certificate")
		}
		leaf := cs.PeerCertificates[0]
		got := sha256.Sum256(leaf.Raw)
		if subtle.ConstantTimeCompare(got[:], pin[:]) != 1 {
			return fmt.Errorf("%w (got %s)", ErrPinMismatch, FormatFingerprint(Fingerprint(leaf.Raw)))
		}
		return nil
	}
	return cfg, nil
}

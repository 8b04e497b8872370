package certs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Load reads a PEM certificate chain and its PEM private key. The returned
// certificate has Leaf set.
func Load(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: read certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: read key: %w", err)
	}
	cert, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%w (%s, %s)", err, certFile, keyFile)
	}
	return cert, nil
}

func parsePair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: key pair: %w", err)
	}
	if cert.Leaf == nil {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("certs: parse certificate: %w", err)
		}
		cert.Leaf = leaf
	}
	return cert, nil
}

// ServerTLSConfig returns a server configuration presenting cert, with TLS
// 1.2 as the floor (QUIC raises it to 1.3 by itself). The caller sets
// NextProtos.
func ServerTLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}
}

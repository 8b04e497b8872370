package certs

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// Names of the files EnsureDevCert keeps in its directory.
const (
	DevCertFile = "cert.pem"
	DevKeyFile  = "key.pem"
)

// devCertValidity is long because a new certificate changes the fingerprint
// every agent has pinned; the key never leaves the machine it was made on.
const devCertValidity = 5 * 365 * 24 * time.Hour

// EnsureDevCert returns the development certificate kept in dir, making a
// self-signed ECDSA P-256 certificate for localhost, 127.0.0.1 and ::1 on
// first use (dir is created with mode 0700, key.pem is written with mode
// 0600). Later calls load the same files, so the fingerprint stays stable
// across restarts; an expired certificate is replaced by a new one (with a
// new fingerprint).
//
// cert.pem is written last and is the commit point: a key without a
// certificate (an interrupted first run) is replaced, a certificate without
// its key is an error. On Unix a key file readable by group or others is
// refused.
//
// fingerprint is Fingerprint of the leaf DER, the value clients pin.
func EnsureDevCert(dir string) (cert tls.Certificate, fingerprint string, err error) {
	certPath := filepath.Join(dir, DevCertFile)
	keyPath := filepath.Join(dir, DevKeyFile)

	_, certErr := os.Stat(certPath)
	switch {
	case certErr == nil:
		cert, err = loadDevCert(certPath, keyPath)
		if err != nil {
			return tls.Certificate{}, "", err
		}
		if time.Now().Before(cert.Leaf.NotAfter) {
			return cert, Fingerprint(cert.Leaf.Raw), nil
		}
		// Expired: fall through and make a new one.
	case errors.Is(certErr, fs.ErrNotExist):
	default:
		return tls.Certificate{}, "", fmt.Errorf("certs: dev certificate: %w", certErr)
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, "", fmt.Errorf("certs: dev certificate directory: %w", err)
	}
	certPEM, keyPEM, err := newDevCert(time.Now())
	if err != nil {
		return tls.Certificate{}, "", err
	}
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, "", fmt.Errorf("certs: write dev key: %w", err)
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, "", fmt.Errorf("certs: write dev certificate: %w", err)
	}
	cert, err = parsePair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	return cert, Fingerprint(cert.Leaf.Raw), nil
}

func loadDevCert(certPath, keyPath string) (tls.Certificate, error) {
	info, err := os.Stat(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return tls.Certificate{}, fmt.Errorf("certs: %s exists but %s does not: restore the key or remove both to make a new certificate", certPath, keyPath)
	}
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: dev key: %w", err)
	}
	if runtime.GOOS != "windows" && info.Mode().Perm()&0o077 != 0 {
		return tls.Certificate{}, fmt.Errorf("certs: %s has mode %04o; a private key must not be readable by others (chmod 600)", keyPath, info.Mode().Perm())
	}
	return Load(certPath, keyPath)
}

func newDevCert(now time.Time) (certPEM, keyPEM []byte, err error) {
	return issue(&x509.Certificate{
		Subject: pkix.Name{Organization: []string{"m2md development"}, CommonName: "localhost"},
		// An hour of slack for peers whose clock is a little behind.
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(devCertValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}, nil, nil)
}

// writeFileAtomic writes through a temporary file in the same directory and
// renames it into place, so a crash never leaves a truncated PEM behind and
// the key is never readable with a wider mode than perm, not even briefly.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	if err := f.Chmod(perm); err != nil && runtime.GOOS != "windows" {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

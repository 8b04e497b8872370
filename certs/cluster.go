package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"time"
)

// A cluster's certificates (m2md cert): one CA per cluster, and a
// certificate per node that it signs, which the node presents on its routes
// as server and as client (mutual TLS) and whose Subject CommonName is the
// node id.

// Default validities: a CA outlives the nodes it signs, and a node
// certificate is reissued (same command) well before the CA expires.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultNodeValidity = 2 * 365 * 24 * time.Hour
)

// ErrExists is returned by WriteNew for a file that is already there.
var ErrExists = errors.New("certs: file exists")

// NodeRequest describes a node certificate: Node is the node id (its
// Subject CommonName); Hosts are the names and IP addresses other nodes
// reach it by (its subject alternative names, which a route's TLS checks).
type NodeRequest struct {
	Node     string
	Hosts    []string
	Validity time.Duration // 0: DefaultNodeValidity
}

// NewCA makes a cluster CA named name: a self-signed ECDSA P-256
// certificate that can sign node certificates but no further CA
// (MaxPathLen 0), valid from an hour before now for validity (0:
// DefaultCAValidity). It returns the certificate and its PKCS #8 key, PEM.
func NewCA(name string, validity time.Duration, now time.Time) (certPEM, keyPEM []byte, err error) {
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{Organization: []string{"m2md cluster"}, CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return issue(tmpl, nil, nil)
}

// IssueNode makes a node certificate for req signed by the CA (caCertPEM,
// caKeyPEM, as NewCA writes them), valid from an hour before now.
func IssueNode(caCertPEM, caKeyPEM []byte, req NodeRequest, now time.Time) (certPEM, keyPEM []byte, err error) {
	if req.Node == "" {
		return nil, nil, errors.New("certs: node certificate without a node id")
	}
	if len(req.Hosts) == 0 {
		return nil, nil, errors.New("certs: node certificate without a host name or address")
	}
	ca, err := parsePair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: cluster CA: %w", err)
	}
	if !ca.Leaf.IsCA {
		return nil, nil, errors.New("certs: the CA certificate is not a CA (make one with m2md cert ca)")
	}
	signer, ok := ca.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("certs: CA key of type %T cannot sign", ca.PrivateKey)
	}
	validity := req.Validity
	if validity <= 0 {
		validity = DefaultNodeValidity
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Leaf.NotAfter) {
		// A certificate cannot outlive its issuer's.
		notAfter = ca.Leaf.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{Organization: []string{"m2md cluster"}, CommonName: req.Node},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return issue(tmpl, ca.Leaf, signer)
}

// issue makes a new P-256 key and a certificate of tmpl for it, signed by
// parent's signer (self-signed when parent is nil), PEM encoded.
func issue(tmpl, parent *x509.Certificate, signer crypto.Signer) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: generate key: %w", err)
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)); err != nil {
		return nil, nil, fmt.Errorf("certs: serial number: %w", err)
	}
	if parent == nil {
		parent, signer = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: create certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// WriteNew writes data to path with mode perm (through a temporary file,
// so the file is never seen with a wider mode or half written). An existing
// path is refused with ErrExists unless overwrite is set.
func WriteNew(path string, data []byte, perm os.FileMode, overwrite bool) error {
	if !overwrite {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%w: %s", ErrExists, path)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("certs: %w", err)
		}
	}
	if err := writeFileAtomic(path, data, perm); err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	return nil
}

package certs

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func parseCertPEM(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestIssueNodeChainVerifies: a node certificate chains to its CA for both
// TLS roles, names the node in its CommonName and its hosts in its SANs, and
// does not chain to another CA.
func TestIssueNodeChainVerifies(t *testing.T) {
	now := time.Now()
	caPEM, caKey, err := NewCA("test cluster CA", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	nodePEM, nodeKey, err := IssueNode(caPEM, caKey, NodeRequest{Node: "host-a", Hosts: []string{"10.0.0.1", "host-a.example", "::1"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parsePair(nodePEM, nodeKey); err != nil {
		t.Fatalf("node certificate and key do not pair: %v", err)
	}
	ca, node := parseCertPEM(t, caPEM), parseCertPEM(t, nodePEM)
	if !ca.IsCA || !ca.MaxPathLenZero {
		t.Fatalf("CA: IsCA %v MaxPathLenZero %v", ca.IsCA, ca.MaxPathLenZero)
	}
	if node.Subject.CommonName != "host-a" || node.IsCA {
		t.Fatalf("node CN %q IsCA %v", node.Subject.CommonName, node.IsCA)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, host := range []string{"10.0.0.1", "host-a.example", "::1"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := node.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s, usage %v: %v", host, usage, err)
			}
		}
	}
	if err := node.VerifyHostname("10.0.0.2"); err == nil {
		t.Error("node certificate valid for a host it was not issued for")
	}
	otherPEM, _, err := NewCA("other CA", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	other := x509.NewCertPool()
	other.AddCert(parseCertPEM(t, otherPEM))
	if _, err := node.Verify(x509.VerifyOptions{Roots: other}); err == nil {
		t.Error("node certificate verifies against another CA")
	}
	// A node certificate is no CA: what it signs does not chain.
	if _, _, err := IssueNode(nodePEM, nodeKey, NodeRequest{Node: "x", Hosts: []string{"x"}}, now); err == nil {
		t.Error("a node certificate issued a certificate")
	}
}

func TestIssueNodeRefusals(t *testing.T) {
	now := time.Now()
	caPEM, caKey, err := NewCA("c", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, _ := NewCA("other", 0, now)
	for name, tc := range map[string]struct {
		key []byte
		req NodeRequest
	}{
		"no node id":   {caKey, NodeRequest{Hosts: []string{"a"}}},
		"no host":      {caKey, NodeRequest{Node: "a"}},
		"wrong CA key": {otherKey, NodeRequest{Node: "a", Hosts: []string{"a"}}},
		"garbage key":  {[]byte("not a key"), NodeRequest{Node: "a", Hosts: []string{"a"}}},
	} {
		if _, _, err := IssueNode(caPEM, tc.key, tc.req, now); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
	// A node certificate never outlives its CA.
	shortCA, shortKey, _ := NewCA("short", 24*time.Hour, now)
	nodePEM, _, err := IssueNode(shortCA, shortKey, NodeRequest{Node: "a", Hosts: []string{"a"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, limit := parseCertPEM(t, nodePEM).NotAfter, parseCertPEM(t, shortCA).NotAfter; got.After(limit) {
		t.Errorf("node certificate ends %v, after its CA (%v)", got, limit)
	}
}

// TestWriteNew: keys 0600 and certificates 0644 as asked, and an existing
// file is refused unless overwriting is asked for.
func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.key")
	if err := WriteNew(path, []byte("one"), 0o600, false); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
			t.Fatalf("mode %04o, want 0600", info.Mode().Perm())
		}
	}
	if err := WriteNew(path, []byte("two"), 0o600, false); !errors.Is(err, ErrExists) {
		t.Fatalf("second write: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one" {
		t.Fatalf("refused write changed the file: %q", b)
	}
	if err := WriteNew(path, []byte("three"), 0o644, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "three" {
		t.Fatalf("overwrite: %q", b)
	}
	if runtime.GOOS != "windows" {
		if info, _ := os.Stat(path); info.Mode().Perm() != 0o644 {
			t.Fatalf("mode %04o, want 0644", info.Mode().Perm())
		}
	}
}

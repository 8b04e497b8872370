package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/negotiate"
)

// writeRouteCerts makes a CA and one certificate it signs for 127.0.0.1
// (server and client use), as PEM files in dir: ca.pem, node.pem, node.key.
func writeRouteCerts(t testing.TB, dir string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "m2md test cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	node := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "m2md node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	nodeDER, err := x509.CreateCertificate(rand.Reader, node, ca, &nodeKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, blk := range map[string]*pem.Block{
		"ca.pem": {Type: "CERTIFICATE", Bytes: caDER}, "node.pem": {Type: "CERTIFICATE", Bytes: nodeDER},
		"node.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(blk), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterRouteTLS: nodes whose routes use mutual TLS with a cluster CA
// (--cluster-tls-cert/-key/-ca) form the cluster and route across it; a node
// without a certificate from that CA never joins.
func TestClusterRouteTLS(t *testing.T) {
	dir := t.TempDir()
	writeRouteCerts(t, dir)
	withTLS := func(c *cluster.Config) {
		var err error
		c.Cert, c.CA, err = cluster.LoadIdentity(filepath.Join(dir, "node.pem"), filepath.Join(dir, "node.key"), filepath.Join(dir, "ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
	}
	nodes := startCluster(t, 2, withTLS, nil)
	prov := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "tprov", Models: []string{"gpt-4o"}})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "treq"})
	waitAgentAt(t, nodes[0], "", "tprov", nodes[1])
	roundTrip(t, req, prov)

	plain := startDaemon(t, clusterConfig([]string{"nats://" + nodes[0].Cluster().RouteAddr.String()}, nil))
	time.Sleep(1500 * time.Millisecond) // several heartbeats, and NATS's route retries
	if n := plain.Cluster().Nodes; n != 0 {
		t.Fatalf("node without the cluster certificate hears %d nodes", n)
	}
	waitMesh(t, nodes) // the members still hear each other, and only each other
}

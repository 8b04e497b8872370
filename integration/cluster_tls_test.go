package integration

import (
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
)

// TestClusterRouteTLS: nodes whose routes use mutual TLS with a cluster CA
// (--cluster-tls-cert/-key/-ca) form the cluster and route across it; a node
// without a certificate from that CA never joins.
func TestClusterRouteTLS(t *testing.T) {
	withTLS := newClusterPKI(t).issue(t, "node", time.Now(), 0, "")
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

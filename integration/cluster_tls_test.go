package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/negotiate"
)

// TestClusterRouteTLS: nodes whose routes use mutual TLS with a cluster CA
// (--cluster-tls-cert/-key/-ca) form the cluster and route across it; a node
// without a certificate from that CA never joins.
func TestClusterRouteTLS(t *testing.T) {
	// One certificate per node, naming it: the cluster authenticates each
	// node's messages with its certificate.
	pki := newClusterPKI(t)
	ids := []string{"tls-a", "tls-b"}
	next := 0
	withTLS := func(c *cluster.Config) {
		c.Node = ids[next]
		next++
		pki.issue(t, c.Node, time.Now(), 0, "")(c)
	}
	nodes := startCluster(t, 2, withTLS, nil)
	prov := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "tprov", Models: []string{"gpt-4o"}})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "treq"})
	waitAgentAt(t, nodes[0], "", "tprov", nodes[1])
	roundTrip(t, req, prov)
	// The links say what protects them, every label present from the start.
	for _, d := range nodes {
		if n := d.Metric(t, "m2md_cluster_links", "auth=mtls"); n < 1 {
			t.Errorf("node %s: %v mtls links", d.Cluster().Node, n)
		}
		m, err := daemontest.FetchMetrics(d.AdminAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{`m2md_cluster_links{auth="token"} 1`, `m2md_cluster_links{auth="none"} 0`, `m2md_cluster_links{auth="password"} 0`, `m2md_cluster_links{auth="tls+creds"} 0`} {
			if !strings.Contains(m, "\n"+line+"\n") {
				t.Errorf("node %s: /metrics has no line %s", d.Cluster().Node, line)
			}
		}
	}

	plain := startDaemon(t, clusterConfig([]string{"nats://" + nodes[0].Cluster().RouteAddr.String()}, nil))
	time.Sleep(1500 * time.Millisecond) // several heartbeats, and NATS's route retries
	if n := plain.Cluster().Nodes; n != 0 {
		t.Fatalf("node without the cluster certificate hears %d nodes", n)
	}
	waitMesh(t, nodes) // the members still hear each other, and only each other
}

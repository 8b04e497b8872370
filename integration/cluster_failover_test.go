package integration

import (
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
)

// TestClusterRemoteProviderLost: a provider on another node whose
// connection closes before it replied has its request failed over on the
// requester's node, to a provider of the model there: the requester gets
// that provider's answer, once.
func TestClusterRemoteProviderLost(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			a := startDaemon(t, clusterConfig(nil, nil))
			b := startDaemon(t, clusterConfig([]string{"nats://" + a.Cluster().RouteAddr.String()}, nil))
			waitMesh(t, []*testDaemon{a, b})
			far := mustDialRaw(t, b, tr, negotiate.ClientConfig{AgentID: "crl-far", Models: []string{"gpt-4o"}})
			waitAgentAt(t, a, "", "crl-far", b)
			req := mustDialRaw(t, a, tr, negotiate.ClientConfig{AgentID: "crl-req"})
			// A node speaks only for the agents it has announced.
			waitAgentAt(t, b, "", "crl-req", a)
			_, id := req.request("", corpus(t, "req-chat-tiny-07.json"))
			far.recvDataAnswering(10 * time.Second)
			near := mustDialRaw(t, a, tr, negotiate.ClientConfig{AgentID: "crl-near", Models: []string{"gpt-4o"}})
			far.conn.Close()
			answerOnce(t, req, near, id, "crl-near")
			waitMetric(t, a, 1, "m2md_failovers_total", "reason=node_gone")
		})
	}
}

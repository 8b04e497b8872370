package integration

import (
	"bytes"
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
)

// TestClusterLargeFrame: a request and a reply of 1.5 MB cross the cluster
// as they cross one daemon (the daemon takes frames up to 16 MiB; NATS's
// own default bound is 1 MB, which the embedded servers raise to match).
// Fails without that: the request is refused agent_gone "node is
// unreachable".
func TestClusterLargeFrame(t *testing.T) {
	nodes := startCluster(t, 2, nil, nil)
	prov := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "lgprov"})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "lgreq"})
	waitAgentAt(t, nodes[0], "", prov.sess.AgentID, nodes[1])
	body := incompressible(t, 3<<19)
	_, id := req.request(prov.sess.AgentID, body)
	got := prov.recvData(10 * time.Second)
	if got.code != "" || !bytes.Equal(got.body, body) {
		t.Fatalf("provider got code %q and %d bytes, want the %d-byte request", got.code, len(got.body), len(body))
	}
	prov.reply(got.ch, got.hdr.RequestID, true, body)
	r := req.recvData(10 * time.Second)
	if r.hdr.RequestID != id || r.code != "" || !bytes.Equal(r.body, body) {
		t.Fatalf("requester got id %d code %q and %d bytes, want the %d-byte reply", r.hdr.RequestID, r.code, len(r.body), len(body))
	}
}

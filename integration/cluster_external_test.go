package integration

import (
	"bytes"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
)

// startNATS runs a standalone nats-server on loopback with a user and
// password, standing in for an existing NATS deployment.
func startNATS(t testing.TB) (*server.Server, string) {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Username: "m2md", Password: "nats-secret",
		// An existing deployment's max_payload is smaller than the
		// daemon's largest frame (NATS's default is 1 MB; smaller here,
		// so that the test's frames are quick to make).
		MaxPayload: 64 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s, "nats://m2md:nats-secret@" + s.Addr().String()
}

// TestClusterExternalNATS: two daemons join an existing NATS deployment
// (--nats-url) instead of embedding one; a requester on one reaches a
// provider on the other by agent id and by model, a stream keeps its order,
// and when NATS goes away a request in flight across it ends with
// agent_gone within 5 s.
func TestClusterExternalNATS(t *testing.T) {
	t.Parallel()
	ns, url := startNATS(t)
	var nodes []*testDaemon
	for range 2 {
		nodes = append(nodes, startDaemon(t, func(c *daemon.Config) {
			c.Cluster = cluster.Config{URLs: []string{url}}
		}))
	}
	waitMesh(t, nodes)
	prov := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "xprov", Models: []string{"gpt-4o"}})
	req := mustDialRaw(t, nodes[0], "quic", negotiate.ClientConfig{AgentID: "xreq"})
	waitAgentAt(t, nodes[0], "", "xprov", nodes[1])
	reqBody := corpus(t, "req-chat-1k-01.json")
	for _, peer := range []string{"xprov", ""} {
		_, id := req.request(peer, reqBody)
		got := prov.recvData(5 * time.Second)
		if !bytes.Equal(got.body, reqBody) || got.peer != "xreq" {
			t.Fatalf("provider got peer %q err %v", got.peer, got.err)
		}
		const chunks = 20
		for k := range chunks {
			prov.reply(got.ch, got.hdr.RequestID, k == chunks-1, chunk("ext", k))
		}
		for k := range chunks {
			r := req.recvData(5 * time.Second)
			if r.hdr.RequestID != id || !bytes.Equal(r.body, chunk("ext", k)) || r.hdr.IsEnd() != (k == chunks-1) {
				t.Fatalf("peer %q chunk %d: id %d end %v", peer, k, r.hdr.RequestID, r.hdr.IsEnd())
			}
		}
	}

	// The deployment's max_payload is below the daemon's: a request or a
	// reply that NATS will not carry is refused too_large, naming the
	// setting, and never waits.
	big := incompressible(t, 128<<10)
	_, id := req.request("xprov", big)
	if r := req.expectError(5*time.Second, id, string(negotiate.CodeTooLarge), false); !bytes.Contains(r.body, []byte("max_payload")) {
		t.Fatalf("too_large without the setting to change: %s", r.body)
	}
	_, id = req.request("xprov", reqBody)
	got := prov.recvData(5 * time.Second)
	prov.reply(got.ch, got.hdr.RequestID, true, big)
	req.expectError(5*time.Second, id, string(negotiate.CodeTooLarge), false)
	prov.expectError(5*time.Second, got.hdr.RequestID, string(negotiate.CodeTooLarge), true)

	// NATS goes away with a request in flight across it.
	_, held := req.request("xprov", reqBody)
	prov.recvData(5 * time.Second)
	start := time.Now()
	ns.Shutdown()
	req.expectError(10*time.Second, held, "agent_gone", false)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("agent_gone came %v after NATS went away, want within 5 s (cluster.DefaultDeadAfter and a heartbeat)", el)
	}
	// Routing to the other node is refused, promptly, while NATS is down.
	_, id = req.request("xprov", reqBody)
	back := req.recvData(3 * time.Second)
	if back.hdr.RequestID != id || (back.code != "unknown_agent" && back.code != "agent_gone") {
		t.Fatalf("request while NATS is down: id %d code %q", back.hdr.RequestID, back.code)
	}
}

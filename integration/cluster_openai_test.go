package integration

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/openai/ingress"
	"github.com/m2md/m2md/openai/upstream"
)

// TestClusterOpenAIEveryNode: every node of a cluster serves the OpenAI
// edge. Two nodes run an open ingress (the same configuration, as m2md
// serve starts it by default); each is its own agent, openai-ingress-NODE,
// so neither refuses or replaces the other, and the OpenAI SDK at either
// reaches the upstream provider connected to the third node.
func TestClusterOpenAIEveryNode(t *testing.T) {
	nodes := startCluster(t, 3, nil, nil)
	up := newTestUpstream(t)
	u, err := upstream.New(upstream.Config{BaseURL: up.srv.URL + "/v1", APIKey: upstreamKey, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	dialClient(t, nodes[2].url("quic"), client.Options{AgentID: "upstream", Models: []string{"gpt-4o"}, Handler: u,
		Security: frame.SecurityAEAD, TLSConfig: nodes[2].clientTLS(t)})
	for _, d := range nodes[:2] {
		waitAgentAt(t, d, "", "upstream", nodes[2])
	}

	var eds []*edges
	for _, d := range nodes[:2] {
		in, base := serveIngress(t, d, "quic", frame.SecurityAEAD, nil)
		eds = append(eds, &edges{d: d, in: in, base: base, upstream: up})
	}
	for i, e := range eds {
		// Each ingress is known to the whole cluster under its own id.
		id := ingress.NodeIdentity(ingress.Identity{AgentID: ingress.OpenIdentity}, e.d.Cluster().Node).AgentID
		for _, d := range nodes {
			waitAgentAt(t, d, "", id, e.d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c := e.sdk("unused")
		resp, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o"))
		if err != nil {
			t.Fatalf("ingress on node %d: %v", i, err)
		}
		if resp.RawJSON() != string(corpus(t, "resp-toolcalls-01.json")) {
			t.Fatalf("ingress on node %d: response differs from the upstream's:\n%s", i, resp.RawJSON())
		}
		// The API byte crosses the cluster: the Responses API reaches the
		// server's /responses.
		r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
		cancel()
		if err != nil || r.RawJSON() != responseJSON() {
			t.Fatalf("ingress on node %d: Responses.New: %v", i, err)
		}
	}
	if n := up.count(); n != 4 {
		t.Fatalf("upstream served %d requests, want 4", n)
	}
}

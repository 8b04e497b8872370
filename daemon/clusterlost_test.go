package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// TestClusterAgentGoneBeforeDeparture: the agent_gone a provider's node
// answers a request with when it loses the provider before a reply can
// reach the requester's node before the provider's departure does (the
// two travel apart, and a lost announcement waits for a snapshot). The
// request is failed over then, to a provider on the requester's node, as
// it is when the departure comes first; before, the requester got the
// agent_gone while that provider sat idle. The test hands node a the
// error as node b sends it, ahead of any departure.
func TestClusterAgentGoneBeforeDeparture(t *testing.T) {
	cfg := func(routes ...string) Config {
		return Config{QUICAddr: "-", WSAddr: "127.0.0.1:0", AdminAddr: "-", CertDir: t.TempDir(),
			Cluster: cluster.Config{Listen: "127.0.0.1:0", Routes: routes}}
	}
	a := runServer(t, cfg())
	b := runServer(t, cfg("nats://"+a.Cluster().RouteAddr.String()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(srv *Server, id string, h client.Handler) *client.Client {
		opt := client.Options{AgentID: id, Handler: h}
		if h != nil {
			opt.Models = []string{"gpt-4o"}
		}
		c, err := client.Dial(ctx, "ws://"+srv.WSAddr().String()+DefaultWSPath, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := make(chan struct{})
	dial(b, "far", client.HandlerFunc(func(ctx context.Context, _ *client.Request, _ client.ResponseWriter) {
		close(held)
		<-ctx.Done()
	}))
	for node, _ := a.agentNode("", "far"); node != b.Cluster().Node; node, _ = a.agentNode("", "far") {
		if ctx.Err() != nil {
			t.Fatal("node a never heard of the provider on node b")
		}
		time.Sleep(10 * time.Millisecond)
	}
	req := dial(a, "req", nil)
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	answered := make(chan error, 1)
	var resp *client.Response
	go func() {
		var err error
		resp, err = req.Do(ctx, body)
		answered <- err
	}()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the provider on node b never got the request")
	}
	dial(a, "near", client.HandlerFunc(func(_ context.Context, _ *client.Request, w client.ResponseWriter) {
		_ = w.Respond([]byte(`{"choices":[{"message":{"content":"near"}}]}`))
	}))

	cs := a.cluster
	cs.mu.Lock()
	n := cs.nodes[b.Cluster().Node]
	cs.mu.Unlock()
	n.mu.Lock()
	var w uint64
	for id := range n.pending {
		w = id
	}
	n.mu.Unlock()
	if w == 0 {
		t.Fatal("node a has no request pending at node b")
	}
	fr, err := frame.AppendErrorFrame(nil, string(negotiate.CodeAgentGone), "provider far is gone (disconnected) before its final reply")
	if err != nil {
		t.Fatal(err)
	}
	cs.Reply(&cluster.Reply{From: b.Cluster().Node, W: w, N: cluster.Unnumbered, End: true, Provider: "far", Frame: fr})

	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("the request whose provider node b lost: %v, want it failed over", err)
		}
		if resp.From != "near" {
			t.Fatalf("answered by %q, want near", resp.From)
		}
	case <-ctx.Done():
		t.Fatal("the request was never answered")
	}
	if st := req.Stats(); st.LateReplies != 0 {
		t.Fatalf("%d replies came for the request after it ended", st.LateReplies)
	}
}
